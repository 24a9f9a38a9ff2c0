package storage

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
)

// User is a tenant: someone who holds a balance, owns API keys and pays per
// token at the operator's prices (table users; docs/billing.md). Operator
// keys (APIKey.UserID "") and admin users (AdminUser) are not users.
type User struct {
	ID    string // stable identifier, assigned by the backend when empty
	Name  string // unique login name, 1 to 64 bytes of text
	Email string // unique when not empty; may also be used to log in
	// PasswordHash is the argon2id hash in PHC string form, as for admin
	// users; "" means the user cannot log in to the console (a user made by
	// the CLI without --password uses keys only).
	PasswordHash string
	// Group is the user's price group: prices are multiplied by the
	// group's multiplier (PriceGroup); "" is the default group (×1).
	Group    string
	Disabled bool     // a disabled user's keys are refused with 401 and it cannot log in
	Models   []string // model allowlist; empty means every model
	// RPM is the user's requests per minute across all its keys; 0 = unlimited.
	RPM int64
	// MaxConcurrency is how many of the user's requests may be in flight at
	// once across all its keys and instances; 0 = unlimited.
	MaxConcurrency int64
	CreatedAt      time.Time  // set by the backend on create
	UpdatedAt      time.Time  // set by the backend on every write but a login's (SetUserLastLogin), always later than the write before
	LastLoginAt    *time.Time // nil until the first console login; written by SetUserLastLogin (and UpdateUser)
	// IfUpdatedAt, when not zero, makes UpdateUser conditional: it writes
	// only when the stored user's UpdatedAt is IfUpdatedAt (to the
	// millisecond: the UpdatedAt the writer read), else it returns an
	// error wrapping ErrStale and writes nothing. Never stored, never set
	// by a read.
	IfUpdatedAt time.Time
}

// MaxUserNameBytes bounds a user's name and email.
const MaxUserNameBytes = 64

// Validate reports whether u can be stored: Name 1 to 64 bytes of text
// without spaces at either end or an "@" (so a name is never taken for an
// email), Email empty or 3 to 254 bytes with an "@", PasswordHash empty or
// an argon2id PHC string, limits not negative, text valid UTF-8 without NUL.
// The error wraps ErrInvalid and never contains the hash.
func (u *User) Validate() error {
	if u.Name == "" || len(u.Name) > MaxUserNameBytes || strings.TrimSpace(u.Name) != u.Name || strings.Contains(u.Name, "@") {
		return fmt.Errorf("%w: user name must be 1 to %d bytes without leading or trailing spaces or an @", ErrInvalid, MaxUserNameBytes)
	}
	if !TextOK(u.ID, u.Name, u.Email, u.Group, u.PasswordHash) || !TextOK(u.Models...) {
		return fmt.Errorf("%w: user %q: text that is not valid UTF-8 (or holds a NUL byte)", ErrInvalid, u.Name)
	}
	if u.Email != "" && (len(u.Email) < 3 || len(u.Email) > 254 || !strings.Contains(u.Email, "@") || strings.TrimSpace(u.Email) != u.Email) {
		return fmt.Errorf("%w: user %q: email must be 3 to 254 bytes with an @", ErrInvalid, u.Name)
	}
	if u.PasswordHash != "" && !strings.HasPrefix(u.PasswordHash, "$argon2id$") {
		return fmt.Errorf("%w: user %q: password hash is not an argon2id PHC string", ErrInvalid, u.Name)
	}
	if len(u.Group) > MaxGroupBytes {
		return fmt.Errorf("%w: user %q: group of %d bytes, at most %d", ErrInvalid, u.Name, len(u.Group), MaxGroupBytes)
	}
	if u.RPM < 0 || u.MaxConcurrency < 0 {
		return fmt.Errorf("%w: user %q: limits must not be negative (rpm %d, concurrency %d)", ErrInvalid, u.Name, u.RPM, u.MaxConcurrency)
	}
	return nil
}

// NewUser holds what CreateUser does besides storing the user, in the same
// transaction.
type NewUser struct {
	// Invitation, when not empty, is the SHA-256 (HashKey) of an invitation
	// code: the user is created only if the code exists, is not disabled or
	// expired and has uses left, and one use is counted (ErrInvalid
	// otherwise, and nothing is written).
	Invitation string
	// Balance, when > 0, is credited as a LedgerTopup row by Actor with Note.
	Balance int64
	Actor   string
	Note    string
}

// LedgerKind is the kind of a ledger row.
type LedgerKind string

// Ledger kinds. A top-up and a refund credit (Amount > 0), a charge debits
// (Amount < 0), an adjustment does either (Amount != 0).
const (
	LedgerTopup      LedgerKind = "topup"
	LedgerCharge     LedgerKind = "charge"
	LedgerRefund     LedgerKind = "refund"
	LedgerAdjustment LedgerKind = "adjustment"
)

// LedgerEntry is one change of a user's balance (table ledger). The balance
// is always the sum of the user's entries' Amounts.
type LedgerEntry struct {
	ID     int64      // assigned by the backend, increasing
	UserID string     // User.ID
	Kind   LedgerKind // topup, charge, refund or adjustment
	// Amount is the change in micro-units of the configured currency
	// (1 = 0.000001): > 0 for topup and refund, < 0 for charge, != 0 for
	// adjustment.
	Amount    int64
	Actor     string // who made the change: "admin:NAME", "cli", "user:NAME", "gateway"
	Note      string // why
	RequestID string // for a charge or a refund: the usage record's RequestID; "" otherwise
	CreatedAt time.Time
}

// Validate reports whether e can be posted: a known kind with an amount of
// its sign, text valid, a user named. The error wraps ErrInvalid.
func (e *LedgerEntry) Validate() error {
	if e.UserID == "" {
		return fmt.Errorf("%w: ledger entry without a user", ErrInvalid)
	}
	switch {
	case e.Kind == LedgerTopup || e.Kind == LedgerRefund:
		if e.Amount <= 0 {
			return fmt.Errorf("%w: a %s must be positive (got %d micro-units)", ErrInvalid, e.Kind, e.Amount)
		}
	case e.Kind == LedgerCharge:
		if e.Amount >= 0 {
			return fmt.Errorf("%w: a charge must be negative (got %d micro-units)", ErrInvalid, e.Amount)
		}
	case e.Kind == LedgerAdjustment:
		if e.Amount == 0 {
			return fmt.Errorf("%w: an adjustment of 0", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: unknown ledger kind %q", ErrInvalid, e.Kind)
	}
	if e.Amount > MaxAmount || e.Amount < -MaxAmount {
		return fmt.Errorf("%w: a ledger amount is at most %d micro-units either way (got %d)", ErrInvalid, int64(MaxAmount), e.Amount)
	}
	if !TextOK(e.UserID, e.Actor, e.Note, e.RequestID) || len(e.Note) > 1000 || len(e.Actor) > 200 {
		return fmt.Errorf("%w: ledger entry: actor or note that is not text, or too long (note at most 1000 bytes)", ErrInvalid)
	}
	return nil
}

// MaxAmount bounds, in micro-units, a ledger entry's amount, a price and
// the balance an operator's entry may leave: 10^15, a billion units of the
// currency. Far below int64's limit, so that no sum of balances, charges
// or rollups the stores keep can overflow (SQLite would turn the column's
// value into a REAL; PostgreSQL would refuse the whole transaction).
const MaxAmount = 1_000_000_000_000_000

// PostBalance returns the balance after posting e to a balance of bal. A
// top-up, refund or adjustment that would leave it beyond ±MaxAmount, away
// from zero, wraps ErrInvalid; a charge is never refused (the gateway's
// charges stand) and saturates at the int64 limit.
func PostBalance(bal int64, e *LedgerEntry) (int64, error) {
	next, overflow := bal+e.Amount, false
	if e.Amount > 0 && next < bal || e.Amount < 0 && next > bal {
		overflow = true
		next = math.MaxInt64
		if e.Amount < 0 {
			next = math.MinInt64
		}
	}
	if e.Kind == LedgerCharge {
		return next, nil
	}
	if overflow || e.Amount > 0 && next > MaxAmount || e.Amount < 0 && next < -MaxAmount {
		return 0, fmt.Errorf("%w: the balance would be beyond ±%d micro-units (it is %d, the %s is %d)", ErrInvalid, int64(MaxAmount), bal, e.Kind, e.Amount)
	}
	return next, nil
}

// CheckRefund reports whether e, a refund naming a request (e.RequestID
// not ""), may be posted against that request's charge: charge is the
// request's charge row (nil when there is none). The refund must be the
// charged user's and at most what was charged; the error wraps ErrInvalid.
// Other entries pass.
func CheckRefund(e *LedgerEntry, charge *LedgerEntry) error {
	if e.Kind != LedgerRefund || e.RequestID == "" {
		return nil
	}
	if charge == nil || charge.UserID != e.UserID {
		return fmt.Errorf("%w: refund: request %q has no charge of this user", ErrInvalid, e.RequestID)
	}
	if e.Amount > -charge.Amount {
		return fmt.Errorf("%w: refund: %d micro-units is more than request %q was charged (%d)", ErrInvalid, e.Amount, e.RequestID, -charge.Amount)
	}
	return nil
}

// LedgerQuery selects a user's ledger rows, newest first. Before, when > 0,
// is the ID of the last row of the previous page. Limit: <= 0 means 100, at
// most 1000.
type LedgerQuery struct {
	UserID string
	Before int64
	Limit  int
}

// PageLimit returns q.Limit clamped as documented.
func (q LedgerQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return 100
	case q.Limit > 1000:
		return 1000
	}
	return q.Limit
}

// Price is what one model costs, per million tokens, in micro-units of
// Currency (table prices): 2.50 per million is 2_500_000.
type Price struct {
	Model       string // the model name the client asks for
	Currency    string // ISO 4217 code, e.g. "USD"
	Input       int64  // uncached input tokens
	CachedInput int64  // input tokens read from the prompt cache
	CacheWrite  int64  // input tokens written to the prompt cache (default Input × 1.25, rounded half up)
	Output      int64  // output tokens (reasoning included)
	UpdatedAt   time.Time
}

// Validate reports whether p can be stored: a model name, a 3-letter
// currency, no negative price. The error wraps ErrInvalid.
func (p *Price) Validate() error {
	if p.Model == "" || !TextOK(p.Model) || len(p.Model) > 200 {
		return fmt.Errorf("%w: price: model must be 1 to 200 bytes of text", ErrInvalid)
	}
	if len(p.Currency) != 3 || strings.ToUpper(p.Currency) != p.Currency || !TextOK(p.Currency) {
		return fmt.Errorf("%w: price of %q: currency %q is not a 3-letter upper-case code", ErrInvalid, p.Model, p.Currency)
	}
	if p.Input < 0 || p.CachedInput < 0 || p.CacheWrite < 0 || p.Output < 0 {
		return fmt.Errorf("%w: price of %q: a price is negative", ErrInvalid, p.Model)
	}
	if max(p.Input, p.CachedInput, p.CacheWrite, p.Output) > MaxAmount {
		return fmt.Errorf("%w: price of %q: a price is at most %d micro-units per million tokens", ErrInvalid, p.Model, int64(MaxAmount))
	}
	return nil
}

// PriceGroup is a user group's price multiplier (table price_groups), in
// parts per million: 1_000_000 is ×1, 800_000 is ×0.8.
type PriceGroup struct {
	Group      string
	Multiplier int64 // parts per million, 1 to MaxMultiplier
}

// MaxMultiplier is the largest group multiplier, in parts per million
// (×1,000): past it a multiplier is a typing slip, not a price.
const MaxMultiplier = 1_000 * 1_000_000

// Validate reports whether g can be stored: a multiplier from 1 to
// MaxMultiplier parts per million, a group of text (TextOK) of at most
// MaxGroupBytes. The error wraps ErrInvalid.
func (g PriceGroup) Validate() error {
	if g.Multiplier <= 0 || g.Multiplier > MaxMultiplier || !TextOK(g.Group) || len(g.Group) > MaxGroupBytes {
		return fmt.Errorf("%w: price group %q: the multiplier must be above 0 and at most x%d, the group text of at most %d bytes",
			ErrInvalid, g.Group, MaxMultiplier/1_000_000, MaxGroupBytes)
	}
	return nil
}

// Invitation is a registration code (table invitations). Only the SHA-256
// of the code is stored.
type Invitation struct {
	ID        string     // assigned by the backend when empty
	Hash      string     // HashKey of the code
	Prefix    string     // first characters of the code, for display
	Note      string     // what it is for
	MaxUses   int64      // how many registrations it allows, >= 1
	Uses      int64      // how many it had
	Disabled  bool       // refused when set
	ExpiresAt *time.Time // nil: never
	CreatedBy string     // who made it
	CreatedAt time.Time
}

// UserDaily is one row of the daily rollup per user and model (table
// usage_daily_users): the sums of the user's usage records of one UTC day
// and model, maintained by InsertUsage in its transaction.
type UserDaily struct {
	Day          time.Time // start of the UTC day
	UserID       string
	Model        string
	Requests     int64
	InputTokens  int64
	CachedTokens int64
	OutputTokens int64
	Cost         int64 // micro-units, the sum of the records' Cost
}

// UserDailyQuery selects daily rollup rows whose Day is in [From, To) (zero:
// open); UserID and Model, when not empty, must be equal.
type UserDailyQuery struct {
	From, To time.Time
	UserID   string
	Model    string
}

// Users stores tenants, their balances and ledgers, prices and invitations.
type Users interface {
	// CreateUser stores u (ID assigned when empty) with a balance of 0,
	// redeems n.Invitation and credits n.Balance, all in one transaction,
	// and returns u as stored. ErrInvalid when u fails Validate or the
	// invitation cannot be used; ErrConflict when the ID, Name or Email is
	// taken.
	CreateUser(ctx context.Context, u User, n NewUser) (User, error)
	// GetUser returns the user whose ID, else Name, else Email is
	// idNameOrEmail, or ErrNotFound.
	GetUser(ctx context.Context, idNameOrEmail string) (User, error)
	// ListUsers returns every user ordered by Name (bytewise); an empty
	// list when there are none.
	ListUsers(ctx context.Context) ([]User, error)
	// UpdateUser replaces every field of the user with u.ID but ID and
	// CreatedAt, and returns it as stored. ErrNotFound, ErrInvalid,
	// ErrConflict (name or email taken).
	UpdateUser(ctx context.Context, u User) (User, error)
	// SetUserLastLogin sets the LastLoginAt of the user with ID id to at
	// (to the millisecond) and nothing else: not UpdatedAt, the version an
	// admin's conditional edit (IfUpdatedAt) is made against, so a login
	// never makes a concurrent edit stale. It returns the user as stored;
	// ErrNotFound.
	SetUserLastLogin(ctx context.Context, id string, at time.Time) (User, error)
	// DeleteUser removes a user that never had a ledger row, with its keys;
	// ErrConflict when it has ledger rows (disable it instead), ErrNotFound.
	DeleteUser(ctx context.Context, idOrName string) error

	// Balance returns the user's balance in micro-units (the sum of its
	// ledger rows), or ErrNotFound when there is no such user.
	Balance(ctx context.Context, userID string) (int64, error)
	// Balances returns the balance of every user, by user ID.
	Balances(ctx context.Context) (map[string]int64, error)
	// PostLedger adds e to the ledger and to the user's balance in one
	// transaction and returns it with ID and CreatedAt set. ErrInvalid when
	// e fails Validate; ErrNotFound when the user does not exist;
	// ErrConflict when e is a charge or refund whose RequestID already has a
	// row of that kind (a request is charged, and refunded, at most once).
	PostLedger(ctx context.Context, e LedgerEntry) (LedgerEntry, error)
	// Ledger returns a user's ledger rows, newest first (see LedgerQuery);
	// nil when none.
	Ledger(ctx context.Context, q LedgerQuery) ([]LedgerEntry, error)

	// PutPrice inserts or replaces the price of p.Model and returns it as
	// stored. ErrInvalid when p fails Validate.
	PutPrice(ctx context.Context, p Price) (Price, error)
	// ListPrices returns every price ordered by model (bytewise); an empty
	// list when there are none.
	ListPrices(ctx context.Context) ([]Price, error)
	// DeletePrice removes the price of model, or returns ErrNotFound.
	DeletePrice(ctx context.Context, model string) error
	// PutPriceGroup sets a group's multiplier (ErrInvalid unless > 0 and the
	// group is text); ListPriceGroups returns them ordered by group;
	// DeletePriceGroup removes one (ErrNotFound).
	PutPriceGroup(ctx context.Context, g PriceGroup) error
	ListPriceGroups(ctx context.Context) ([]PriceGroup, error)
	DeletePriceGroup(ctx context.Context, group string) error

	// CreateInvitation stores inv (ID assigned when empty, Uses 0) and
	// returns it. ErrInvalid (hash not a SHA-256 hex digest, MaxUses < 1),
	// ErrConflict (hash or ID taken).
	CreateInvitation(ctx context.Context, inv Invitation) (Invitation, error)
	// ListInvitations returns every invitation, newest first.
	ListInvitations(ctx context.Context) ([]Invitation, error)
	// DisableInvitation marks an invitation disabled (ErrNotFound).
	DisableInvitation(ctx context.Context, id string) error

	// UserDaily returns daily rollup rows matching q ordered by day, user,
	// model; nil when none.
	UserDaily(ctx context.Context, q UserDailyQuery) ([]UserDaily, error)
	// PruneUserDaily deletes the daily rollup rows whose Day is before
	// before (in batches, each its own short transaction, as PruneUsage)
	// and returns how many it deleted; on an error the batches already
	// committed stay deleted and are counted. A zero time deletes nothing.
	// Balances and the ledger are never pruned: they do not depend on the
	// rollups.
	PruneUserDaily(ctx context.Context, before time.Time) (int64, error)
}

// Well-known settings of tenants (table settings).
const (
	// SettingRegistration is how users may register themselves:
	// RegistrationClosed (the default: only admins create users),
	// RegistrationInvite (with an invitation code) or RegistrationOpen.
	SettingRegistration = "users.registration"
	// SettingCurrency is the currency of balances and new prices (ISO 4217,
	// default DefaultCurrency).
	SettingCurrency = "billing.currency"
)

// Registration modes (values of SettingRegistration).
const (
	RegistrationClosed = "closed"
	RegistrationInvite = "invite"
	RegistrationOpen   = "open"
)

// DefaultCurrency is the currency when SettingCurrency is unset.
const DefaultCurrency = "USD"

// ValidRegistration reports whether mode is a registration mode.
func ValidRegistration(mode string) bool {
	switch mode {
	case RegistrationClosed, RegistrationInvite, RegistrationOpen:
		return true
	}
	return false
}
