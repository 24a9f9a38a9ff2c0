import type { Diagnostic } from '@codemirror/lint'

/** PolicyProblem is a policy error as the validate API reports it. */
export interface PolicyProblem {
  message: string
  line: number // 1-based Lua line; 0 when unknown
}

/**
 * problemLine picks the document line (1-based) a policy error belongs on.
 * The API's line when it is one of the document's; past the end, or for an
 * error at the end of the file ("at end of file", Lua's "<eof>") without
 * one, the last line that is not blank: where the missing `end` or quote
 * belongs. Without a line, one in the message ("policy p:12: …") is used;
 * failing all, the first line.
 */
export function problemLine(lines: string[], p: PolicyProblem): number {
  let last = lines.length
  while (last > 1 && lines[last - 1].trim() === '') last--
  let line = p.line
  if (!(line >= 1)) {
    const m = /:(\d+):/.exec(p.message)
    line = m ? Number(m[1]) : 0
  }
  if (line > lines.length) return Math.max(last, 1)
  if (line >= 1) return line
  if (/<eof>|end of file/i.test(p.message)) return Math.max(last, 1)
  return 1
}

/**
 * diagnosticsFor turns a policy error into a CodeMirror diagnostic that
 * covers its line (problemLine). lines are the document's lines.
 */
export function diagnosticsFor(lines: string[], p: PolicyProblem | null): Diagnostic[] {
  if (!p) return []
  const line = problemLine(lines, p)
  let from = 0
  for (let i = 0; i < line - 1; i++) from += lines[i].length + 1
  const to = from + (lines[line - 1]?.length ?? 0)
  return [{ from, to: Math.max(to, from), severity: 'error', message: p.line ? `line ${p.line}: ${p.message}` : p.message, source: 'troupe' }]
}
