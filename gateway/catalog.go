package gateway

// ModelCatalog lists the models the upstream says its accounts can serve
// (upstream.CodexCatalog: the Codex backend's models list of every plan).
// GET /v1/models adds them when a codex account serves any model (an empty
// models list), since such an account's own configuration names none.
type ModelCatalog interface {
	// Models returns the model ids, sorted; safe for concurrent use.
	Models() []string
}

// SetModelCatalog installs the catalog behind /v1/models (call before Serve).
func (s *Server) SetModelCatalog(c ModelCatalog) { s.catalog = c }
