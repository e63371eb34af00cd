package broker

import (
	_ "embed"
	"net/http"
)

// openapiDoc is the hand-written OpenAPI 3.1 document of every route; a test checks that
// each registered route is in it.
//
//go:embed openapi.json
var openapiDoc []byte

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ Token) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openapiDoc)
}
