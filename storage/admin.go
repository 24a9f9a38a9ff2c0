package storage

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// AdminUser is an operator who may log in to the admin UI (table
// admin_users). Only a password hash is stored, never the password.
type AdminUser struct {
	ID       string // stable identifier, assigned by the backend when empty
	Username string // unique login name, 1 to 64 bytes of text
	// PasswordHash is the argon2id hash in PHC string form
	// ("$argon2id$v=19$m=…,t=…,p=…$salt$hash", RFC 9106 parameters);
	// produced and checked by the gateway, opaque to storage.
	PasswordHash string
	Disabled     bool       // a disabled user cannot log in
	CreatedAt    time.Time  // set by the backend on create
	UpdatedAt    time.Time  // set by the backend on every write
	LastLoginAt  *time.Time // nil until the first successful login
}

// Validate reports whether u can be stored: Username must be 1 to 64 bytes
// of valid UTF-8 text without NUL or spaces at either end, and PasswordHash
// must start with "$argon2id$". The error wraps ErrInvalid and never
// contains the hash.
func (u *AdminUser) Validate() error {
	if u.Username == "" || len(u.Username) > 64 || strings.TrimSpace(u.Username) != u.Username || !TextOK(u.Username, u.ID) {
		return fmt.Errorf("%w: admin username must be 1 to 64 bytes of text without leading or trailing spaces", ErrInvalid)
	}
	if !strings.HasPrefix(u.PasswordHash, "$argon2id$") || !TextOK(u.PasswordHash) {
		return fmt.Errorf("%w: admin user %q: password hash is not an argon2id PHC string", ErrInvalid, u.Username)
	}
	return nil
}

// AdminUsers stores the admin UI's users.
type AdminUsers interface {
	// CreateAdminUser stores u (ID assigned when empty) and returns it as
	// stored. ErrInvalid when u fails Validate; ErrConflict when the ID or
	// Username is taken.
	CreateAdminUser(ctx context.Context, u AdminUser) (AdminUser, error)
	// GetAdminUser returns the user with the given ID or, else, Username, or ErrNotFound.
	GetAdminUser(ctx context.Context, idOrUsername string) (AdminUser, error)
	// ListAdminUsers returns every user ordered by Username (bytewise); an
	// empty list when there are none.
	ListAdminUsers(ctx context.Context) ([]AdminUser, error)
	// UpdateAdminUser replaces PasswordHash, Disabled and LastLoginAt of the
	// user with u.ID and returns it as stored (Username and CreatedAt never
	// change). ErrNotFound if absent, ErrInvalid if u fails Validate.
	UpdateAdminUser(ctx context.Context, u AdminUser) (AdminUser, error)
	// DeleteAdminUser removes the user with the given ID or Username, or returns ErrNotFound.
	DeleteAdminUser(ctx context.Context, idOrUsername string) error
}

// UsageRecordQuery selects usage records for the request log: those whose
// At is at or after From and before To (a zero From or To leaves that side
// open); non-empty string fields and a non-zero Status must be equal;
// FailedOnly keeps records with Status >= 400. Records come newest first
// (At, then RequestID, both descending). After, when its RequestID is set,
// is the last record of the previous page: only records that sort after it
// are returned. Limit is the page size: <= 0 means 100, at most 1000.
type UsageRecordQuery struct {
	From, To   time.Time
	KeyID      string
	AccountID  string
	Model      string
	UserID     string // the paying user (UsageRecord.UserID)
	Status     int
	FailedOnly bool
	After      UsageCursor
	Limit      int
}

// UsageCursor marks a position in the request log: the At and RequestID of
// the last record of a page.
type UsageCursor struct {
	At        time.Time
	RequestID string
}

// PageLimit returns q.Limit clamped to the contract: 100 when <= 0, at most 1000.
func (q UsageRecordQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return 100
	case q.Limit > 1000:
		return 1000
	}
	return q.Limit
}

// UsageLog reads usage records back, for the admin request log.
type UsageLog interface {
	// ListUsageRecords returns the records matching q, newest first, at
	// most q.PageLimit() of them; nil when none match.
	ListUsageRecords(ctx context.Context, q UsageRecordQuery) ([]UsageRecord, error)
}
