package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/troupe-gw/troupe/admin"
	adminui "github.com/troupe-gw/troupe/admin-ui"
	"github.com/troupe-gw/troupe/storage"
)

// adminUser is the name of the admin user created on first start.
const adminUser = "admin"

// adminSetup is what setupAdmin did on this start.
type adminSetup struct {
	created   bool   // the first admin user was created
	generated string // its random password, when admin.password was not set; printed once
}

// setupAdmin installs the admin UI and, when storage has no admin user yet,
// creates "admin" with admin.password (TROUPE_ADMIN_PASSWORD) or a random
// password that the caller prints once. In production mode an unset or weak
// admin.password is refused instead.
func (a *app) setupAdmin(ctx context.Context) error {
	a.adminAPI.SetUI(adminui.FS())
	a.adminAPI.SetInfo(map[string]any{"version": version, "mode": a.cfg.Mode, "storage": a.cfg.Storage.Driver,
		"cache": a.cfg.Cache.Driver, "listen": a.cfg.Listen, "ui_built": adminui.Built()})
	users, err := a.store.ListAdminUsers(ctx)
	if err != nil {
		return fmt.Errorf("admin users: %w", err)
	}
	if len(users) > 0 {
		return nil
	}
	pw := a.cfg.Admin.Password
	if pw == "" {
		if a.cfg.Mode == modeProduction {
			return errors.New("mode production: set admin.password (TROUPE_ADMIN_PASSWORD) for the first admin user; a random one is for development only")
		}
		if pw, err = admin.NewPassword(); err != nil {
			return fmt.Errorf("admin password: %w", err)
		}
		a.admin.generated = pw
	}
	if err := createAdmin(ctx, a.store, pw); err != nil {
		if errors.Is(err, storage.ErrConflict) { // another instance created it first
			a.admin.generated = ""
			return nil
		}
		return err
	}
	a.admin.created = true
	// A generated password has its one notice on stdout (printAdminPassword),
	// beside the password itself: the log does not repeat it.
	if a.admin.generated == "" {
		a.log.Info("admin user created", "user", adminUser, "password", "admin.password")
	} else {
		a.log.Info("admin user created", "user", adminUser)
	}
	return nil
}

// createAdmin stores the admin user with password pw.
func createAdmin(ctx context.Context, s storage.Store, pw string) error {
	hash, err := admin.HashPassword(pw)
	if err != nil {
		return fmt.Errorf("admin password: %w", err)
	}
	if _, err := s.CreateAdminUser(ctx, storage.AdminUser{Username: adminUser, PasswordHash: hash}); err != nil {
		return fmt.Errorf("admin user: %w", err)
	}
	return nil
}

// resetAdminPassword sets the admin user's password (creating the user when
// missing) to pw, or to a random one when pw is "", and returns it. The demo
// owns its data directory and uses it at every start.
func resetAdminPassword(ctx context.Context, s storage.Store, pw string) (string, error) {
	if pw == "" {
		var err error
		if pw, err = admin.NewPassword(); err != nil {
			return "", err
		}
	}
	u, err := s.GetAdminUser(ctx, adminUser)
	if errors.Is(err, storage.ErrNotFound) {
		return pw, createAdmin(ctx, s, pw)
	}
	if err != nil {
		return "", err
	}
	if u.PasswordHash, err = admin.HashPassword(pw); err != nil {
		return "", err
	}
	u.Disabled = false
	_, err = s.UpdateAdminUser(ctx, u)
	return pw, err
}

// printAdminPassword prints the generated first admin password, once.
func (a *app) printAdminPassword(w io.Writer) {
	if a.admin.generated == "" {
		return
	}
	fmt.Fprintf(w, "# The admin UI (http://%s/admin/) has a new user %q; its password is shown this once:\nTROUPE_ADMIN_PASSWORD=%s\n",
		a.uiHost(), adminUser, a.admin.generated)
	a.admin.generated = ""
}

// uiHost is the host:port to reach the admin UI at.
func (a *app) uiHost() string {
	b := a.baseURL()
	return b[len("http://") : len(b)-len("/v1")]
}

// adminCmd is "troupe admin": the admin user, from the command line.
func adminCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "admin", Short: "Manage the admin UI's user"}
	dataFlag(cmd)
	password := &cobra.Command{
		Use:   "password",
		Short: "Set the admin user's password and print it (the way back in when it is lost)",
		Long: `Set the password of the admin UI's user "admin" to admin.password
(TROUPE_ADMIN_PASSWORD) or, when that is not set, to a random one printed on
stdout. The user is created when missing and enabled when disabled; its
sessions on running instances end at their next request. Run it against the
storage the gateway uses (--data or -c).`,
		Example: `  troupe admin password --data ./data
  TROUPE_ADMIN_PASSWORD='a long passphrase' troupe admin password -c troupe.yaml`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withConfigStore(cmd, func(ctx context.Context, cfg *Config, s storage.Store) error {
				pw, err := resetAdminPassword(ctx, s, cfg.Admin.Password)
				if err != nil {
					return err
				}
				if cfg.Admin.Password != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "# the password of %q is now admin.password\n", adminUser)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "TROUPE_ADMIN_PASSWORD=%s\n", pw)
				fmt.Fprintf(cmd.ErrOrStderr(), "# the new password of %q is shown this once\n", adminUser)
				return nil
			})
		},
	}
	cmd.AddCommand(password)
	return cmd
}
