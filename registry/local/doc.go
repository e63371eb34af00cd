// Package local decides, with no network, what registry decides about the artifacts the
// host cache already holds: references (ParseRef), whether a manifest agrees with its own
// lock (CheckConsistent), whether the current trust policy lets a cached digest be used
// from a repository (CheckUse), and Ensure, which serves a reference by digest from the
// cache alone and says ErrNeedsNetwork for anything else.
//
// It is registry's offline half, apart so that pylayer's front end (a warm run by digest)
// links none of the registry protocol: net/http's client is there for the broker, but not
// go-containerregistry's auth and transport, the Docker credential helpers or logrus.
// registry re-exports these names (registry.Ref, registry.CheckUse ...) and its Ensure
// tries Ensure here first, so that every use of a cached digest is decided in one place.
package local
