package scripts

import (
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// MaxConcatOperands is the most values one concatenation expression
// (a .. b .. c) may join. The VM joins them in a single instruction, which
// no budget can interrupt, so the operand count bounds what one instruction
// can allocate: with the library functions' 1 MiB limit on the strings they
// build, and the slow-call memory guard between instructions (budget), a
// policy cannot build hundreds of MiB at once.
const MaxConcatOperands = 16

// checkConcat refuses a compiled chunk with a concatenation of more than
// MaxConcatOperands values, naming its line.
func checkConcat(policy string, p *lua.FunctionProto) error {
	for pc, inst := range p.Code {
		if int(inst>>26) != lua.OP_CONCAT {
			continue
		}
		b, c := int(inst&0x1ff), int(inst>>9)&0x1ff // R(A) := R(B) .. … .. R(C)
		if n := c - b + 1; n > MaxConcatOperands {
			line := 0
			if pc < len(p.DbgSourcePositions) {
				line = p.DbgSourcePositions[pc]
			}
			return &Error{Policy: policy, Kind: ErrSyntax, Line: line,
				Msg: fmt.Sprintf("one expression concatenates %d values, over the limit of %d: split it (a concatenation runs as one VM instruction, which no budget can stop)", n, MaxConcatOperands)}
		}
	}
	for _, f := range p.FunctionPrototypes {
		if err := checkConcat(policy, f); err != nil {
			return err
		}
	}
	return nil
}
