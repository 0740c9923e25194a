// The message box: Enter sends, Shift+Enter starts a new line; files join by the Attach button,
// by dropping them on the box or by pasting them, and show as thumbnails until sent. `children`
// are the extra controls beside the send button (delivery, Stop).

import type { FileUIPart } from "ai";
import type { ReactNode } from "react";
import { useEffect, useRef, useState } from "react";
import { authHeaders } from "./api";

/** What the server takes (it decides the type from the bytes). */
const ACCEPT = "image/png,image/jpeg,image/gif,image/webp,application/pdf,text/plain,text/markdown,.md";

export interface ComposerProps {
  value: string;
  onChange(value: string): void;
  files: FileUIPart[];
  onFiles(files: FileUIPart[]): void;
  onSend(): void;
  placeholder: string;
  sendLabel: string;
  children?: ReactNode;
}

/** A file as the AI SDK's file part: its bytes as a `data:` URL. */
function asPart(file: File): Promise<FileUIPart> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ type: "file", mediaType: file.type || "application/octet-stream", filename: file.name, url: String(reader.result) });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

export function Composer({ value, onChange, files, onFiles, onSend, placeholder, sendLabel, children }: ComposerProps) {
  const picker = useRef<HTMLInputElement>(null);
  const add = async (list: FileList | null | undefined) => {
    if (!list || list.length === 0) return;
    onFiles([...files, ...(await Promise.all(Array.from(list, asPart)))]);
  };
  return (
    <form
      className="composer"
      onSubmit={(e) => {
        e.preventDefault();
        onSend();
      }}
      onDragOver={(e) => e.preventDefault()}
      onDrop={(e) => {
        e.preventDefault();
        void add(e.dataTransfer?.files);
      }}
    >
      {files.length > 0 && (
        <ul className="attachments" data-testid="attachments">
          {files.map((f, i) => (
            <li key={i} data-testid="attachment">
              <FileThumb part={f} />
              <button type="button" className="remove" title="Remove" onClick={() => onFiles(files.filter((_, j) => j !== i))}>
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
      <textarea
        data-testid="input"
        value={value}
        placeholder={placeholder}
        onChange={(e) => onChange(e.target.value)}
        onPaste={(e) => {
          if (e.clipboardData.files.length > 0) {
            e.preventDefault();
            void add(e.clipboardData.files);
          }
        }}
        onKeyDown={(e) => {
          if (e.key === "Enter" && !e.shiftKey) {
            e.preventDefault();
            onSend();
          }
        }}
      />
      <div className="composer-actions">
        <input
          ref={picker}
          type="file"
          multiple
          accept={ACCEPT}
          hidden
          data-testid="file-input"
          onChange={(e) => {
            void add(e.target.files);
            e.target.value = "";
          }}
        />
        <button type="button" className="secondary" data-testid="attach" title="Attach images, PDFs or text files" onClick={() => picker.current?.click()}>
          Attach
        </button>
        {children}
        <button type="submit" data-testid="send">
          {sendLabel}
        </button>
      </div>
    </form>
  );
}

/** A file part shown small: the image itself, else its name. */
export function FileThumb({ part }: { part: FileUIPart }) {
  const url = useFileUrl(part.url);
  if (part.mediaType.startsWith("image/")) {
    return <img className="thumb" data-testid="file-thumb" src={url} alt={part.filename ?? "image"} title={part.filename} />;
  }
  return (
    <a className="file-chip" data-testid="file-chip" href={url} target="_blank" rel="noreferrer">
      {part.filename ?? part.mediaType}
    </a>
  );
}


/**
 * A URL the page can show: a `data:` URL as it is; a stored file (the files route, which wants
 * the caller's token) fetched with it and shown from a blob.
 */
function useFileUrl(url: string): string | undefined {
  const own = url.startsWith("/v1/");
  const [shown, setShown] = useState<string | undefined>(own ? undefined : url);
  useEffect(() => {
    if (!own) return;
    let blob: string | undefined;
    let live = true;
    void fetch(url, { headers: authHeaders() })
      .then((r) => (r.ok ? r.blob() : Promise.reject(new Error(String(r.status)))))
      .then((b) => {
        blob = URL.createObjectURL(b);
        if (live) setShown(blob);
      })
      .catch(() => undefined);
    return () => {
      live = false;
      if (blob) URL.revokeObjectURL(blob);
    };
  }, [url]);
  return shown;
}
