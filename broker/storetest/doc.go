// Package storetest is the conformance suite every broker.Store implementation runs, the
// way containerd tests its content stores: call Run from the implementation's tests with
// a constructor that returns a new, empty store.
//
// It imports testing, so it must never be imported by non-test code.
package storetest
