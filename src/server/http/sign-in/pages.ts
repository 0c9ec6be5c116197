import type { FastifyReply } from "fastify";

/**
 * The sign-in pages: server-rendered HTML that works without JavaScript
 * (there is none: the CSP allows no script at all), one stylesheet from our
 * own origin, never framed (frame-ancestors 'none', against clickjacking a
 * confirm button), never cached, and no Referer sent on to the upstream
 * provider (our URLs carry flow handles).
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'",
  "x-frame-options": "DENY",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
};

export const STYLESHEET_PATH = "/sign-in/style.css";

/** Calm, legible, high-contrast; focus always visible. */
export const STYLESHEET = `body{font:16px/1.5 system-ui,sans-serif;margin:0;color:#1a1a1a;background:#f6f6f4}
main{max-width:28rem;margin:4rem auto;padding:2rem;background:#fff;border:1px solid #ccc;border-radius:8px}
h1{font-size:1.5rem;margin-top:0}ul{list-style:none;padding:0}li{margin:.5rem 0}
button{font:inherit;width:100%;padding:.6rem;border:1px solid #1f4fbf;border-radius:6px;background:#1f4fbf;color:#fff;cursor:pointer}
button.secondary{background:#fff;color:#1f4fbf}
input{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #767676;border-radius:6px;letter-spacing:.1em}
label{display:block;margin-bottom:.25rem;font-weight:600}
:focus-visible{outline:3px solid #b35c00;outline-offset:2px}
.error{color:#a00000}.note{color:#555;font-size:.9rem}`;

/** Text for HTML: every character that could open markup or end an attribute escaped. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

/** A whole page: language, title, one main landmark with the heading first. */
export function page(title: string, body: string): string {
  return (
    `<!doctype html><html lang="en"><head><meta charset="utf-8">` +
    `<meta name="viewport" content="width=device-width, initial-scale=1">` +
    `<title>${escapeHtml(title)}</title><link rel="stylesheet" href="${STYLESHEET_PATH}"></head>` +
    `<body><main><h1>${escapeHtml(title)}</h1>${body}</main></body></html>`
  );
}

/** Hidden inputs for a form, from name → value. */
export function hiddenFields(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    .join("");
}

/** Sends a page with the page headers. */
export function sendPage(reply: FastifyReply, status: number, title: string, body: string): FastifyReply {
  return reply.code(status).headers(PAGE_HEADERS).send(page(title, body));
}

/** An error page: what went wrong and what to do; never a redirect. */
export function sendErrorPage(
  reply: FastifyReply,
  status: number,
  message: string,
  advice = "Start signing in again from your application.",
): FastifyReply {
  return sendPage(reply, status, "Sign-in failed", `<p class="error" role="alert">${escapeHtml(message)}</p><p>${escapeHtml(advice)}</p>`);
}
