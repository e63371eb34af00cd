// Package fsx is pylayer's one home for durable file-system steps: a file written
// aside and renamed (or linked) into place whole, fsynced, with its directory
// fsynced after it (Pending, WriteFile, CreateFile); a directory or a whole file
// system flushed (SyncDir, SyncFS); and readers that stop once their context is
// done (Reader, ReadCloser).
//
// Everything that must survive a crash with either the old or the new content
// goes through it, so that the order of the steps (write, chmod, fsync, close,
// rename, fsync the directory) is written once.
//
// It imports only the standard library and golang.org/x/sys: every pylayer
// package may use it, and it must never import one of them. It never prints and
// never logs.
package fsx
