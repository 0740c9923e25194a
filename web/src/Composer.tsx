// The message box: Enter sends, Shift+Enter starts a new line; `children` are the extra
// controls beside the send button (delivery, Stop).

import type { ReactNode } from "react";

export interface ComposerProps {
  value: string;
  onChange(value: string): void;
  onSend(): void;
  placeholder: string;
  sendLabel: string;
  children?: ReactNode;
}

export function Composer({ value, onChange, onSend, placeholder, sendLabel, children }: ComposerProps) {
  return (
    <form
      className="composer"
      onSubmit={(e) => {
        e.preventDefault();
        onSend();
      }}
    >
      <textarea
        data-testid="input"
        value={value}
        placeholder={placeholder}
        onChange={(e) => onChange(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && !e.shiftKey) {
            e.preventDefault();
            onSend();
          }
        }}
      />
      <div className="composer-actions">
        {children}
        <button type="submit" data-testid="send">
          {sendLabel}
        </button>
      </div>
    </form>
  );
}
