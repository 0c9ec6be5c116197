/**
 * What the `platform-api auth` commands share about failing: the error whose one line the command prints
 * before it exits 1, the advice most failures end with, and the cleaning of text from elsewhere (a server's
 * answer, a browser's callback) before it reaches the terminal.
 */

/** The server `auth` talks to when neither --server nor PLATFORM_URL names one. */
export const DEFAULT_SERVER = "http://localhost:8080";

/**
 * Why a `platform-api auth` command failed, in one line for the person at the terminal: what went wrong and,
 * when there is one, what to do about it. Never carries a token.
 */
export class AuthCommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AuthCommandError";
  }
}

/** What a person runs to sign in again at server. */
export function signInAgain(server: string): string {
  return server === DEFAULT_SERVER ? "platform-api auth login" : `platform-api auth login --server ${server}`;
}

/**
 * text as one printable line of at most 300 characters: what a server or a browser's callback says is shown
 * to a terminal, where control characters (escape sequences, new lines) could rewrite what the person sees.
 */
export function printable(text: string): string {
  // eslint-disable-next-line no-control-regex
  const line = text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g, " ").trim();
  return line.length > 300 ? `${line.slice(0, 299)}…` : line;
}
