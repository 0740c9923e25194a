// Markdown from the model (or an artifact) rendered as sanitised HTML: marked parses it,
// DOMPurify removes scripts, handlers and anything else that could run in the page.

import DOMPurify from "dompurify";
import { marked } from "marked";

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

export function renderMarkdown(text: string): string {
  return DOMPurify.sanitize(marked.parse(text, { async: false, gfm: true, breaks: true }) as string);
}

export function Markdown({ text, className }: { text: string; className?: string }) {
  return <div className={`markdown ${className ?? ""}`} dangerouslySetInnerHTML={{ __html: renderMarkdown(text) }} />;
}
