import { useEffect, useRef } from 'react'
import { EditorView, basicSetup } from 'codemirror'
import { EditorState, Compartment } from '@codemirror/state'
import { StreamLanguage } from '@codemirror/language'
import { lua } from '@codemirror/legacy-modes/mode/lua'
import { setDiagnostics, lintGutter } from '@codemirror/lint'
import { oneDarkish } from './theme'
import { diagnosticsFor, type PolicyProblem } from './lualint'

interface Props {
  value: string
  onChange: (v: string) => void
  problem: PolicyProblem | null
  dark: boolean
}

/** PolicyEditor is CodeMirror 6 with Lua highlighting; problem marks its line. */
export function PolicyEditor({ value, onChange, problem, dark }: Props) {
  const host = useRef<HTMLDivElement>(null)
  const view = useRef<EditorView | null>(null)
  const theme = useRef(new Compartment())
  const changed = useRef(onChange)
  changed.current = onChange

  useEffect(() => {
    const v = new EditorView({
      parent: host.current!,
      state: EditorState.create({
        doc: value,
        extensions: [
          basicSetup,
          StreamLanguage.define(lua),
          lintGutter(),
          theme.current.of(dark ? oneDarkish : []),
          EditorView.updateListener.of((u) => {
            if (u.docChanged) changed.current(u.state.doc.toString())
          }),
        ],
      }),
    })
    view.current = v
    return () => v.destroy()
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [])

  // A new document from outside (another policy opened).
  useEffect(() => {
    const v = view.current
    if (v && v.state.doc.toString() !== value) v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: value } })
  }, [value])

  useEffect(() => {
    view.current?.dispatch({ effects: theme.current.reconfigure(dark ? oneDarkish : []) })
  }, [dark])

  useEffect(() => {
    const v = view.current
    if (!v) return
    const lines = v.state.doc.toString().split('\n')
    v.dispatch(setDiagnostics(v.state, diagnosticsFor(lines, problem)))
  }, [problem, value])

  return <div className="editor" ref={host} data-testid="policy-editor" />
}
