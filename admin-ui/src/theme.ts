import { EditorView } from '@codemirror/view'
import { HighlightStyle, syntaxHighlighting } from '@codemirror/language'
import { tags as t } from '@lezer/highlight'

// A dark editor theme matching the UI's dark colours.
export const oneDarkish = [
  EditorView.theme(
    {
      '&': { color: '#e6edf3', backgroundColor: '#0d1117' },
      '.cm-content': { caretColor: '#e6edf3' },
      '.cm-gutters': { backgroundColor: '#0d1117', color: '#7d8590', border: 'none' },
      '.cm-activeLine': { backgroundColor: '#161b2299' },
      '.cm-activeLineGutter': { backgroundColor: '#161b22' },
      '&.cm-focused .cm-selectionBackground, ::selection': { backgroundColor: '#264f78' },
    },
    { dark: true },
  ),
  syntaxHighlighting(
    HighlightStyle.define([
      { tag: t.keyword, color: '#ff7b72' },
      { tag: [t.string, t.special(t.string)], color: '#a5d6ff' },
      { tag: t.number, color: '#79c0ff' },
      { tag: t.comment, color: '#8b949e', fontStyle: 'italic' },
      { tag: [t.variableName, t.propertyName], color: '#e6edf3' },
      { tag: t.operator, color: '#ff7b72' },
      { tag: [t.bool, t.null, t.atom], color: '#79c0ff' },
    ]),
  ),
]
