package admin

import (
	"errors"
	"strconv"

	"github.com/trustelem/zxcvbn"
)

// Admin password strength (CheckPassword). A password is judged by zxcvbn
// (github.com/trustelem/zxcvbn, a port of Dropbox's estimator), whose
// frequency lists ship inside the binary: the 30,000 most common passwords
// of the 10-million-password corpus, English words, names and surnames, with
// their l33t, reversed and capitalized forms, plus keyboard walks,
// repeats, sequences and dates. It estimates how many guesses an attacker
// who knows those patterns needs.
const (
	// minPasswordScore is the zxcvbn score a password needs: 3 is
	// "safely unguessable" (at least 10^8 guesses); "password1234",
	// "changeme1234" and "aaaaaaaaaaaa" score 0 or 1.
	minPasswordScore = 3
	// passwordJudged bounds the characters zxcvbn looks at: its matching
	// grows faster than linearly (300 characters take over a second), and a
	// longer password is strong by its length unless its start is weak.
	passwordJudged = 100
)

// passwordContext are words that make a password guessable here.
var passwordContext = []string{"troupe", "admin", "administrator", "gateway"}

// CheckPassword reports whether password may be an admin or console
// user password: 12
// to 1024 bytes, and not guessable by the patterns and lists above (a
// zxcvbn score of at least 3). The error says why, without the password.
func CheckPassword(password string) error {
	if len(password) < 12 {
		return errors.New("a password needs at least 12 characters")
	}
	if len(password) > maxPasswordBytes {
		return errors.New("a password may have at most " + strconv.Itoa(maxPasswordBytes) + " bytes")
	}
	judged := []rune(password)
	if len(judged) > passwordJudged {
		judged = judged[:passwordJudged]
	}
	r := zxcvbn.PasswordStrength(string(judged), passwordContext)
	if r.Score < minPasswordScore {
		return errors.New("that password is too easy to guess (a common password, a word with digits, a repeat or a sequence): " +
			"use a longer passphrase of unrelated words, or a generated password")
	}
	return nil
}
