import type { Diagnostic } from '@codemirror/lint'

/** PolicyProblem is a policy error as the validate API reports it. */
export interface PolicyProblem {
  message: string
  line: number // 1-based Lua line; 0 when unknown
}

/**
 * diagnosticsFor turns a policy error into a CodeMirror diagnostic that
 * covers its line (the whole document's first line when the line is unknown
 * or past the end). lines are the document's lines.
 */
export function diagnosticsFor(lines: string[], p: PolicyProblem | null): Diagnostic[] {
  if (!p) return []
  let line = p.line
  if (!(line >= 1 && line <= lines.length)) line = 1
  let from = 0
  for (let i = 0; i < line - 1; i++) from += lines[i].length + 1
  const to = from + (lines[line - 1]?.length ?? 0)
  return [{ from, to: Math.max(to, from), severity: 'error', message: p.line ? `line ${p.line}: ${p.message}` : p.message, source: 'troupe' }]
}
