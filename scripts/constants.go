package scripts

import (
	"fmt"
	"strings"

	"github.com/yuin/gopher-lua/parse"
)

// MaxConstants bounds the distinct names, numbers and strings of a policy's
// source (4,096). gopher-lua's compiler looks each constant up in its
// function's list one by one, so compiling grows with the square of their
// count: 40,000 distinct constants in 280 KiB took 4 s of CPU, in the
// admin API's request, while the shipped policies have at most a few
// hundred. Counting every distinct token of those kinds over the whole
// source bounds the constants of each function from above.
const MaxConstants = 4096

// checkConstants refuses source with more than MaxConstants distinct
// names, numbers and strings, before it is compiled. The scan is linear;
// a lexical error is left to the parser, which reports it with its line.
func checkConstants(name, source string) error {
	sc := parse.NewScanner(strings.NewReader(source), chunkName(name))
	lx := &parse.Lexer{}
	type constant struct {
		kind int
		text string
	}
	seen := make(map[constant]struct{}, 256)
	for {
		tok, err := sc.Scan(lx)
		if err != nil || tok.Type < 0 {
			return nil
		}
		lx.PrevTokenType = tok.Type
		switch tok.Type {
		case parse.TIdent, parse.TNumber, parse.TString:
			k := constant{tok.Type, tok.Str}
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
			if len(seen) > MaxConstants {
				return &Error{Policy: name, Kind: ErrSyntax, Line: tok.Pos.Line, Msg: fmt.Sprintf(
					"more than %d distinct names, numbers and strings (compiling grows with the square of their count): use a table built by a loop, or fewer literals", MaxConstants)}
			}
		}
	}
}
