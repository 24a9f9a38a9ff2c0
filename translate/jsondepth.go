package translate

// DepthExceeds reports whether the JSON text b nests arrays and objects more
// than limit levels deep. It is one non-recursive pass that skips strings
// (escapes included) and does not validate, so it is safe on hostile input of
// any size; run it before a recursive validator or parser (gjson.Valid
// recurses once per level and a 16 MiB body of "[" would exhaust the stack).
func DepthExceeds(b []byte, limit int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b); i++ {
				if b[i] == '\\' {
					i++
				} else if b[i] == '"' {
					break
				}
			}
		case '[', '{':
			depth++
			if depth > limit {
				return true
			}
		case ']', '}':
			depth--
		}
	}
	return false
}
