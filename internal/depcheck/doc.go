// Package depcheck holds only a test: that the import arrows between pylayer's packages
// point the way README's Layout says (as go-containerregistry's depcheck does). It is
// never imported.
package depcheck
