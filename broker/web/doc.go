// Package web holds the approver web page: plain HTML, CSS and JavaScript with no build
// step and no framework, embedded in the binary and served by the broker at / and
// /static/. The page renders every piece of data with textContent (never innerHTML), loads
// nothing from other origins and runs under a Content-Security-Policy without inline
// script, so a package named <script> is shown, never run.
//
// It is data only: it must never import broker or anything else of pylayer.
package web
