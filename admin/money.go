package admin

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/troupe-gw/troupe/billing"
)

// amountField is a money field of a request body. The admin API takes an
// amount as a JSON string holding a decimal amount of the currency
// ("12.50"), read digit by digit into integer micro-units
// (billing.ParseAmount), never as a JSON number: a number is kept as its
// text (Number), so that the answer can say what to send instead rather
// than that the whole body is not JSON.
type amountField struct {
	Text   string // the string's value, when the field was a string
	Number string // the JSON number as sent, when the field was a number
	Set    bool   // the field was present, not null and not ""
}

// UnmarshalJSON takes a string or a number; null and "" leave it unset;
// any other JSON value is an error (the body's 400).
func (a *amountField) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*a = amountField{}
		return nil
	case len(b) > 0 && b[0] == '"':
		*a = amountField{}
		if err := json.Unmarshal(b, &a.Text); err != nil {
			return err
		}
		a.Set = a.Text != "" // "" is no amount, as an absent field
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	*a = amountField{Number: n.String(), Set: true}
	return nil
}

// amountFormat says what an amount field takes, with an example in the
// field's own name: the format named by every refusal of one.
func amountFormat(param string) string {
	return `Send a decimal amount of the currency as a JSON string, with at most 6 digits after the point: {"` + param +
		`": "12.50"} is twelve and a half units (12500000 micro-units, as the answers' *_micro fields count them).`
}

// parseAmountField reads f, named param in the body, into micro-units. A
// JSON number is refused saying which string to send for it (as units,
// and as micro-units when it looks like a count of them); a string that is
// not a decimal amount, or a negative amount when negative is false, is
// refused naming the format. The refusal is a 400 naming param.
func parseAmountField(param string, f amountField, negative bool) (int64, *APIError) {
	if f.Number != "" {
		msg := param + " was the JSON number " + f.Number + "; amounts are never JSON numbers. " + amountFormat(param)
		if v, err := billing.ParseAmount(f.Number); err == nil && v >= 0 {
			msg += ` For ` + f.Number + ` units send "` + f.Number + `"`
			if n, err := strconv.ParseInt(f.Number, 10, 64); err == nil && n >= 1000 {
				msg += `; for ` + f.Number + ` micro-units send "` + billing.FormatAmount(n) + `"`
			}
			msg += "."
		}
		return 0, errBadParam(param, msg)
	}
	v, err := billing.ParseAmount(f.Text)
	if err != nil {
		return 0, errBadParam(param, param+" "+strconv.Quote(f.Text)+" is not a decimal amount. "+amountFormat(param))
	}
	if v < 0 && !negative {
		return 0, errBadParam(param, param+" "+strconv.Quote(f.Text)+" is negative; it cannot be. "+amountFormat(param))
	}
	return v, nil
}
