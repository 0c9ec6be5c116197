/**
 * The browser sign-in's way back to the command (RFC 8252 §7.3): an HTTP
 * listener on 127.0.0.1, on a port the system picks, whose `/callback` takes
 * the authorization response once. It answers the first callback and stops
 * listening: the response must come from the issuer signed in at (RFC 9207
 * `iss`, the defence against mix-up) and carry this sign-in's `state` (an old
 * tab's or a forged request's does not); a refusal (`error=access_denied`) or
 * a mismatch fails the sign-in, with a page saying so.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { AuthCommandError, printable } from "./error.js";

/** The registered path of our loopback redirect URI. */
export const CALLBACK_PATH = "/callback";

/** What the callback must match. */
export interface CallbackExpectation {
  /** The `state` sent in this sign-in's authorization request. */
  state: string;
  /** The server's issuer (its metadata's `issuer`). */
  issuer: string;
  /** Whether the server promises `iss` in every response (RFC 9207 metadata); then a response without it is refused. */
  issRequired: boolean;
  /** How long to wait for the browser. */
  timeoutMs: number;
}

/** A listening callback: the redirect URI to send, and the authorization code once the browser comes back. */
export interface LoopbackListener {
  redirectUri: string;
  /** The code; rejects with AuthCommandError on a refusal, a mismatch or the timeout. */
  code: Promise<string>;
  /** Stops listening (the code then never comes). */
  close(): void;
}

/** Starts the listener on 127.0.0.1, port 0. */
export async function listenForCallback(expect: CallbackExpectation): Promise<LoopbackListener> {
  let settle!: (outcome: string | AuthCommandError) => void;
  const code = new Promise<string>((resolve, reject) => {
    settle = (outcome) => (typeof outcome === "string" ? resolve(outcome) : reject(outcome));
  });
  // Settled when the browser comes, perhaps before anyone awaits it: its refusal is not an unhandled one.
  code.catch(() => {});
  let answered = false;
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (req.method !== "GET" || url.pathname !== CALLBACK_PATH) return page(res, 404, "Not found", "This is not a sign-in address.");
    if (answered) return page(res, 400, "Sign-in already finished", "This sign-in has had its answer. Return to the terminal.");
    answered = true;
    const outcome = judge(url.searchParams, expect);
    // The outcome counts once the page is sent, so the browser shows it before the command moves on.
    res.on("close", () => finish(outcome));
    if (typeof outcome === "string") page(res, 200, "Signed in", "You are signed in. You can close this tab and return to the terminal.");
    else page(res, 400, "Sign-in failed", `${outcome.message}. Return to the terminal.`);
  });
  const timer = setTimeout(
    () =>
      finish(new AuthCommandError(`no answer from the browser within ${duration(expect.timeoutMs)}; run login again (or use --headless)`)),
    expect.timeoutMs,
  );
  let finished = false;
  function finish(outcome: string | AuthCommandError): void {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    server.close();
    server.closeAllConnections();
    settle(outcome);
  }
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err) => reject(new AuthCommandError(`cannot listen on 127.0.0.1 for the browser's answer: ${err.message}`)));
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    redirectUri: `http://127.0.0.1:${port}${CALLBACK_PATH}`,
    code,
    close: () => finish(new AuthCommandError("the sign-in was stopped")),
  };
}

function duration(ms: number): string {
  return ms >= 120_000 ? `${Math.round(ms / 60_000)} minutes` : `${Math.round(ms / 1000)} s`;
}

/** The code of a valid authorization response, or why it is refused. */
function judge(params: URLSearchParams, expect: CallbackExpectation): string | AuthCommandError {
  // RFC 9207 §2.4: the issuer is checked before anything else in the response, errors included.
  const iss = params.get("iss");
  if (iss === null ? expect.issRequired : iss !== expect.issuer) {
    const from = iss === null ? "no issuer" : `issuer ${printable(iss)}`;
    return new AuthCommandError(`the browser's answer names ${from}, not ${expect.issuer}; not signing in (a mix-up or a forged answer)`);
  }
  if (params.get("state") !== expect.state)
    return new AuthCommandError("the browser's answer is not for this sign-in (its state differs: an old tab or a forged answer)");
  const error = params.get("error");
  if (error !== null) {
    const description = params.get("error_description");
    const said = printable(description === null ? error : `${error}: ${description}`);
    return new AuthCommandError(error === "access_denied" ? `sign-in was refused or cancelled (${said})` : `sign-in failed (${said})`);
  }
  const code = params.get("code");
  if (code === null || code === "") return new AuthCommandError("the browser's answer carries no authorization code");
  return code;
}

/** A small HTML page: no script, no style, nothing loaded, no referrer, not cached, never framed. */
function page(res: ServerResponse<IncomingMessage>, status: number, title: string, text: string): void {
  const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
    "cache-control": "no-store",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    connection: "close",
  });
  res.end(
    `<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>${escape(title)} · platform-api</title></head>` +
      `<body><main><h1>${escape(title)}</h1><p>${escape(text)}</p></main></body></html>\n`,
  );
}
