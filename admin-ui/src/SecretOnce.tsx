import { useState } from 'react'

/**
 * SecretOnce is the dialog that shows a new key's secret the one time it
 * exists in clear (only its hash is stored), with Copy and Done. Used by the
 * admin's Keys page and the users' console.
 */
export function SecretOnce({ name, secret, onDone }: { name: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false)
  return (
    <div className="modal">
      <div className="card form">
        <h3>Key {name} created</h3>
        <p>Copy the secret now: it is shown this once and only its hash is stored.</p>
        <code className="secret" data-testid="new-secret">
          {secret}
        </code>
        <div className="row">
          <button
            onClick={() =>
              navigator.clipboard
                ?.writeText(secret)
                .then(() => setCopied(true))
                .catch(() => setCopied(false))
            }
          >
            {copied ? 'Copied' : 'Copy'}
          </button>
          <button className="ghost" onClick={onDone}>
            Done
          </button>
        </div>
      </div>
    </div>
  )
}
