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

// writeFree reports whether no function the chunk defines, at any depth,
// assigns to a table (t[k] = v, t.k = v): then a score or route call cannot
// change the view tables, since every other way to write them (rawset,
// table.insert, table.remove, table.sort) refuses read-only tables, and
// the account table's fill may compare with what it stored last instead of
// reading the table back (accountTable.trusted). The top-level chunk itself
// is not looked at: it runs once, at load, before any view exists, and
// cannot be called again. A table constructor's SETLIST fills only the
// table it has just made.
func writeFree(chunk *lua.FunctionProto) bool {
	var free func(p *lua.FunctionProto) bool
	free = func(p *lua.FunctionProto) bool {
		for _, inst := range p.Code {
			if op := int(inst >> 26); op == lua.OP_SETTABLE || op == lua.OP_SETTABLEKS {
				return false
			}
		}
		for _, f := range p.FunctionPrototypes {
			if !free(f) {
				return false
			}
		}
		return true
	}
	for _, f := range chunk.FunctionPrototypes {
		if !free(f) {
			return false
		}
	}
	return true
}
