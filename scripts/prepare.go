package scripts

// Prepare compiles source as policy name and self-tests it like Load, and
// gives it version (its stored version, 0 when not stored), but does not
// make it active: a canary is run
// side by side with the active policy (see Install). On failure the error
// wraps an *Error with the line; nothing changes.
func (h *Host) Prepare(name, source string, version uint64) (*Policy, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := Compile(name, source, h.opts.Options)
	if err != nil {
		return nil, err
	}
	var sample []AccountView
	if h.opts.Sample != nil {
		sample = h.opts.Sample()
	}
	if err := SelfTest(p, sample); err != nil {
		p.Close()
		return nil, err
	}
	p.version = version
	return p, nil
}

// Install makes p, from Prepare, the active policy, keeping its version (so
// a promoted canary is counted under the version it ran as). Like a Load it
// goes through HostOptions.Install: when that fails, the active policy is
// unchanged and the failure is counted and returned. p is not closed either
// way (it may still serve as a canary).
func (h *Host) Install(p *Policy) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.loads++
	commit, err := h.ready(p)
	if err != nil {
		h.failed(p.name, err, 0, h.active.Load())
		return err
	}
	h.active.Store(p)
	h.record(&ReloadStatus{OK: true, Name: p.name, Digest: p.digest}, p)
	commit()
	if h.opts.Log != nil {
		h.opts.Log.Info("policy installed", "policy", p.name, "version", p.version, "digest", p.digest[:12])
	}
	return nil
}
