/**
 * `platform-api auth login|token|status|logout`: a person's sign-in from the
 * command line, kept per server (see credentials.ts). `auth token` is
 * what scripts run before every call, so with a valid token at hand it reads
 * one file and prints: no server code, no protobuf, no HTTP client; the
 * sign-in itself is imported only by `auth login`.
 */
import { parseCommandArgs, UsageError } from "../args.js";
import type { Command } from "../command.js";
import { credentialsPath, readCredentials, withCredentialsLock, writeCredentials, type ServerCredentials } from "./credentials.js";
import { AuthCommandError, DEFAULT_SERVER, printable, signInAgain } from "./error.js";

const SERVER_OPTION = { server: { type: "string" } } as const;
const SERVER_USAGE = "[--server <url>]";
const USAGES = {
  login: `usage: platform-api auth login [--headless] [--identity-provider <uid> | --org <name> | --provider <id>] ${SERVER_USAGE}`,
  token: `usage: platform-api auth token ${SERVER_USAGE}`,
  status: `usage: platform-api auth status ${SERVER_USAGE}`,
  logout: `usage: platform-api auth logout ${SERVER_USAGE}`,
};
const USAGE = Object.values(USAGES)
  .map((u, i) => (i === 0 ? u : u.replace("usage:", "      ")))
  .join("\n");
/** A token expiring sooner than this is refreshed first: a call made with it must not fail on the way. */
const REFRESH_MARGIN_MS = 60_000;

/** The server named by --server, else PLATFORM_URL, else the default: its URL without a trailing slash (the profile's name). */
function serverUrl(option: string | undefined, usage: string): string {
  const fromEnv = process.env.PLATFORM_URL;
  const [source, text] = option !== undefined ? ["--server", option] : fromEnv ? ["PLATFORM_URL", fromEnv] : ["", DEFAULT_SERVER];
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(`${source} ${text}: not a URL`, usage);
  }
  if ((url.protocol !== "http:" && url.protocol !== "https:") || url.search !== "" || url.hash !== "" || url.username !== "")
    throw new UsageError(`${source} ${text}: not a plain http:// or https:// URL`, usage);
  return url.href.replace(/\/+$/, "");
}

function parsedServer(args: string[], usage: string): string {
  const { values } = parseCommandArgs(args, usage, SERVER_OPTION);
  return serverUrl(values.server as string | undefined, usage);
}

function notSignedIn(server: string): AuthCommandError {
  return new AuthCommandError(`not signed in to ${server}; sign in: ${signInAgain(server)}`);
}

const isFresh = (c: ServerCredentials) => Date.parse(c.expiry) - Date.now() > REFRESH_MARGIN_MS;

/**
 * The server's credentials with an API token valid for at least another minute: the stored one, or a new
 * one from the refresh token (rotated, and saved before it is used). Refreshing holds the credentials lock,
 * and looks again once it has it: a command that refreshed meanwhile has left a fresh token to use, and the
 * refresh token it spent is never presented again (the server would take that for theft and end the session).
 */
async function currentCredentials(server: string, path: string): Promise<ServerCredentials> {
  const stored = readCredentials(path)[server];
  if (stored === undefined) throw notSignedIn(server);
  if (isFresh(stored)) return stored;
  const { exchangeRefreshToken, RefreshRefusedError } = await import("./server.js");
  return withCredentialsLock(path, async () => {
    const all = readCredentials(path);
    const current = all[server];
    if (current === undefined) throw notSignedIn(server);
    if (isFresh(current)) return current;
    try {
      all[server] = await exchangeRefreshToken(server, current.refreshToken);
    } catch (err) {
      if (!(err instanceof RefreshRefusedError)) throw err;
      // Refused: unless a writer that ignored the lock rotated it meanwhile, the session is over; forget it.
      const latest = readCredentials(path);
      const theirs = latest[server];
      if (theirs !== undefined && theirs.refreshToken !== current.refreshToken && isFresh(theirs)) return theirs;
      if (theirs?.refreshToken === current.refreshToken) {
        delete latest[server];
        writeCredentials(path, latest);
      }
      throw err;
    }
    writeCredentials(path, all);
    return all[server];
  });
}

const SUBCOMMANDS: Record<keyof typeof USAGES, (args: string[]) => Promise<number>> = {
  async login(args) {
    const { values } = parseCommandArgs(args, USAGES.login, {
      ...SERVER_OPTION,
      headless: { type: "boolean", default: false },
      "identity-provider": { type: "string" },
      org: { type: "string" },
      provider: { type: "string" },
    });
    const scope = {
      idp: (values["identity-provider"] as string) ?? "",
      org: (values.org as string) ?? "",
      provider: (values.provider as string) ?? "",
    };
    if (Object.values(scope).filter((v) => v !== "").length > 1)
      throw new UsageError("--identity-provider, --org and --provider name where to sign in: give one at most", USAGES.login);
    const server = serverUrl(values.server as string | undefined, USAGES.login);
    const { login } = await import("./login.js");
    return login({ server, headless: values.headless === true, scope, credentialsPath: credentialsPath() });
  },

  async token(args) {
    const server = parsedServer(args, USAGES.token);
    const { token } = await currentCredentials(server, credentialsPath());
    process.stdout.write(`${token}\n`);
    return 0;
  },

  async status(args) {
    const server = parsedServer(args, USAGES.status);
    const path = credentialsPath();
    const all = readCredentials(path);
    if (all[server] === undefined) {
      const others = Object.keys(all);
      const hint = others.length === 0 ? "" : ` (signed in to ${others.join(", ")}: choose with --server or PLATFORM_URL)`;
      throw new AuthCommandError(`not signed in to ${server}${hint}`);
    }
    const credentials = await currentCredentials(server, path);
    const { whoAmI } = await import("./server.js");
    const me = await whoAmI(server, credentials.token);
    const minutes = Math.floor((Date.parse(credentials.expiry) - Date.now()) / 60_000);
    const lines = [
      `server:   ${server}`,
      `identity: ${me.subject}`,
      ...(me.email === "" ? [] : [`email:    ${printable(me.email)}`]),
      `token:    valid until ${credentials.expiry} (${minutes} minutes; \`platform-api auth token\` renews it)`,
      `stored:   ${path}`,
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
    return 0;
  },

  async logout(args) {
    const server = parsedServer(args, USAGES.logout);
    const path = credentialsPath();
    const stored = readCredentials(path)[server];
    if (stored === undefined) {
      process.stderr.write(`Not signed in to ${server}; nothing to do.\n`);
      return 0;
    }
    // The server first, so the session cannot outlive the local copy; offline, the local copy goes all the same.
    let revoked = "";
    try {
      const { discover, revokeRefreshToken } = await import("./server.js");
      await revokeRefreshToken(await discover(server), stored.refreshToken);
    } catch (err) {
      if (!(err instanceof AuthCommandError)) throw err;
      revoked = printable(err.message);
    }
    await withCredentialsLock(path, async () => {
      const all = readCredentials(path);
      delete all[server];
      writeCredentials(path, all);
    });
    process.stderr.write(
      revoked === ""
        ? `Signed out of ${server}.\n`
        : `Signed out of ${server} here; the server was not told (${revoked}), so the session stays valid there until it expires.\n`,
    );
    return 0;
  },
};

export const authCommand: Command = {
  summary: "sign in as a person and print API tokens for curl, buf curl and gRPC (login, token, status, logout)",
  help: `${USAGE}

Signs a person in to a server and keeps the session, per server, in $XDG_CONFIG_HOME/platform-api/credentials.json (~/.config/platform-api/credentials.json by default; the directory 0700, the file 0600, and a file others may read is refused). The server is --server <url>, else PLATFORM_URL, else ${DEFAULT_SERVER}: the server's auth URL (PLATFORM_AUTH_URL).

  login    Opens the server's sign-in page in a browser (the command in $BROWSER, else open, xdg-open…) and always prints its URL; the page hands the sign-in back to this command on 127.0.0.1 (OAuth 2.0 authorization code with PKCE). --headless, for a machine without a browser (over SSH): prints a page and a code to enter there from any device, and waits (the device grant). --identity-provider <uid> signs in through an organization's identity provider, --org <name> through one of that organization's, --provider <id> through one of the server's own; else the page lists them.
  token    Prints a valid API token, alone on stdout, getting a new one with the refresh token when less than a minute is left: curl -H "Authorization: Bearer $(platform-api auth token)" …
  status   Says who the token stands for (GET /auth/v1/ok) and until when; exits 1 when not signed in.
  logout   Ends the session at the server (revokes the refresh token) and forgets it here; offline, forgets it here.

Exits 0 when done, 1 when it failed (one line on stderr says why), 2 on usage errors. No token is printed except by \`auth token\`.`,
  async run(args) {
    const [name, ...rest] = args;
    if (name === undefined) throw new UsageError("which one: login, token, status or logout?", USAGE);
    const subcommand = Object.hasOwn(SUBCOMMANDS, name) ? SUBCOMMANDS[name as keyof typeof USAGES] : undefined;
    if (subcommand === undefined)
      throw new UsageError(`unknown auth command ${JSON.stringify(name)}: login, token, status or logout`, USAGE);
    try {
      return await subcommand(rest);
    } catch (err) {
      if (!(err instanceof AuthCommandError)) throw err;
      process.stderr.write(`platform-api auth ${name}: ${printable(err.message)}\n`);
      return 1;
    }
  },
};
