package main

import (
	"errors"
	"fmt"

	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/storage"
)

// Config.Mode values.
const (
	modeDevelopment = "development"
	modeProduction  = "production"
)

// checkMode checks mode and, in production, that no secret is left empty,
// at a default or guessable: the master key must be configured (not
// generated into the data directory beside the data it protects) and look
// random (storage.CheckKey), and an admin.password, when set, must pass
// admin.CheckPassword. (An unset admin.password
// is refused in production only when the first admin user must be
// created; see setupAdmin.)
func (c *Config) checkMode() []error {
	switch c.Mode {
	case modeDevelopment:
		return nil
	case modeProduction:
	default:
		return []error{fmt.Errorf("mode %q: want development or production", c.Mode)}
	}
	var errs []error
	if c.Storage.MasterKey == "" {
		errs = append(errs, errors.New("mode production: storage.master_key (TROUPE_STORAGE_MASTER_KEY) must be set; the generated key file is for development"))
	} else if k, err := storage.ParseKey(c.Storage.MasterKey); err == nil { // a malformed key is refused where it is read
		if err := storage.CheckKey(k); err != nil {
			errs = append(errs, fmt.Errorf("mode production: storage.master_key: %w", err))
		}
	}
	if c.Admin.Password != "" {
		if err := admin.CheckPassword(c.Admin.Password); err != nil {
			errs = append(errs, fmt.Errorf("mode production: admin.password: %w", err))
		}
	}
	return errs
}
