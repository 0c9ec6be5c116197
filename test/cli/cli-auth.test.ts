/**
 * `platform-api auth` as a person runs it (the compiled command), where no server is needed: `auth token`
 * prints the stored token of the server named (--server, PLATFORM_URL, or the default), alone on stdout; not
 * signed in, a file others may read, a server that cannot be reached for a refresh: one line and exit 1,
 * never a token; `auth logout` with the server down forgets the session here and says the server was not
 * told; bad arguments are usage errors (exit 2). Signing in, refreshing, status and revocation against the
 * real server are in test/cli/cli-auth-e2e.test.ts.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { credentialsPath, readCredentials, writeCredentials, type CredentialsByServer } from "../../src/cli/auth/credentials.js";
import { platformCli } from "../support/platform-cli.js";

const dir = mkdtempSync(join(tmpdir(), "platform-cli-auth-"));
after(() => rmSync(dir, { recursive: true, force: true }));
let configs = 0;

/** A fresh config directory holding servers' credentials; the env that points the command at it. */
function signedIn(servers: CredentialsByServer): { env: Record<string, string>; path: string } {
  const env = { XDG_CONFIG_HOME: join(dir, `config-${++configs}`), PLATFORM_URL: "" };
  const path = credentialsPath(env);
  writeCredentials(path, servers);
  return { env, path };
}

const auth = (env: Record<string, string>, ...args: string[]) => platformCli(join(dir, "no-data"), ["auth", ...args], env);
const inAnHour = () => new Date(Date.now() + 3_600_000).toISOString();
const inThirtySeconds = () => new Date(Date.now() + 30_000).toISOString();

/** A URL of this machine where nothing listens (a port just closed). */
let down: string;
before(async () => {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, "127.0.0.1", resolve));
  down = `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  await new Promise<void>((resolve) => s.close(() => resolve()));
});

test("auth token prints the stored token of the server named, alone on stdout", async () => {
  const { env } = signedIn({
    "http://localhost:8080": { token: "token-of-default", expiry: inAnHour(), refreshToken: "prt_a" },
    "https://api.acme.example": { token: "token-of-acme", expiry: inAnHour(), refreshToken: "prt_b" },
  });
  const byDefault = await auth(env, "token");
  assert.deepEqual(byDefault, { code: 0, stdout: "token-of-default\n", stderr: "" });
  const byOption = await auth(env, "token", "--server", "https://api.acme.example/");
  assert.deepEqual(byOption, { code: 0, stdout: "token-of-acme\n", stderr: "" });
  const byEnvironment = await auth({ ...env, PLATFORM_URL: "https://API.acme.example:443" }, "token");
  assert.deepEqual(byEnvironment, { code: 0, stdout: "token-of-acme\n", stderr: "" });
});

test("not signed in: auth token and auth status say so in one line and exit 1", async () => {
  const { env } = signedIn({ "https://api.acme.example": { token: "t", expiry: inAnHour(), refreshToken: "prt_a" } });
  const token = await auth(env, "token", "--server", "https://other.example");
  assert.deepEqual(token, {
    code: 1,
    stdout: "",
    stderr:
      "platform-api auth token: not signed in to https://other.example; sign in: platform-api auth login --server https://other.example\n",
  });
  const status = await auth(env, "status");
  assert.deepEqual(status, {
    code: 1,
    stdout: "",
    stderr:
      "platform-api auth status: not signed in to http://localhost:8080 (signed in to https://api.acme.example: choose with --server or PLATFORM_URL)\n",
  });
});

test("a credentials file others may read is refused: one line, exit 1, no token", async () => {
  const { env, path } = signedIn({ "http://localhost:8080": { token: "secret-token", expiry: inAnHour(), refreshToken: "prt_a" } });
  chmodSync(path, 0o644);
  const run = await auth(env, "token");
  assert.equal(run.code, 1);
  assert.equal(run.stdout, "");
  assert.match(run.stderr, new RegExp(`^platform-api auth token: ${path} has mode 0644: others may read it.*chmod 600 ${path}.*\\n$`));
  assert.doesNotMatch(run.stderr, /secret-token|prt_a/);
});

test("a token about to expire, and the server down: one line, exit 1, no token, the stored session kept", async () => {
  const stored = { [down]: { token: "old-token", expiry: inThirtySeconds(), refreshToken: "prt_keep" } };
  const { env, path } = signedIn(stored);
  const run = await auth(env, "token", "--server", down);
  assert.deepEqual(run, {
    code: 1,
    stdout: "",
    stderr: `platform-api auth token: cannot reach ${down}: connection refused (is the server running there?)\n`,
  });
  assert.deepEqual(readCredentials(path), stored);
});

test("auth logout with the server down forgets the session here, says the server was not told, and keeps the others", async () => {
  const other = { token: "t2", expiry: inAnHour(), refreshToken: "prt_other" };
  const { env, path } = signedIn({ [down]: { token: "t", expiry: inAnHour(), refreshToken: "prt_a" }, "https://b.example": other });
  const run = await auth(env, "logout", "--server", down);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout, "");
  assert.equal(
    run.stderr,
    `Signed out of ${down} here; the server was not told (cannot reach ${down}: connection refused (is the server running there?)), so the session stays valid there until it expires.\n`,
  );
  assert.deepEqual(readCredentials(path), { "https://b.example": other });
  const again = await auth(env, "logout", "--server", down);
  assert.deepEqual(again, { code: 0, stdout: "", stderr: `Not signed in to ${down}; nothing to do.\n` });
});

test("auth login against a server that cannot be reached: one line, exit 1, nothing stored", async () => {
  const { env, path } = signedIn({});
  const run = await auth(env, "login", "--headless", "--server", down);
  assert.deepEqual(run, {
    code: 1,
    stdout: "",
    stderr: `platform-api auth login: cannot reach ${down}: connection refused (is the server running there?)\n`,
  });
  assert.deepEqual(JSON.parse(readFileSync(path, "utf8")).servers, {});
});

test("bad arguments are usage errors: a line naming the problem, the usage, exit 2", async () => {
  const { env } = signedIn({});
  const cases: [string[], Record<string, string>, RegExp][] = [
    [[], {}, /^platform-api auth: which one: login, token, status or logout\?\nusage: platform-api auth login/],
    [["whoami"], {}, /^platform-api auth: unknown auth command "whoami": login, token, status or logout\n/],
    [["token", "--headless"], {}, /^platform-api auth: unknown option --headless\nusage: platform-api auth token \[--server <url>\]\n$/],
    [["token", "extra"], {}, /^platform-api auth: unexpected argument "extra"\n/],
    [["status", "--server"], {}, /^platform-api auth: --server needs a value\n/],
    [
      ["logout", "--server", "ftp://x.example"],
      {},
      /^platform-api auth: --server ftp:\/\/x\.example: not a plain http:\/\/ or https:\/\/ URL\n/,
    ],
    [["token"], { PLATFORM_URL: "not a url" }, /^platform-api auth: PLATFORM_URL not a url: not a URL\n/],
    [["login", "--org", "acme", "--identity-provider", "x"], {}, /give one at most\nusage: platform-api auth login /],
  ];
  for (const [args, extra, stderr] of cases) {
    const run = await auth({ ...env, ...extra }, ...args);
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
    assert.equal(run.stdout, "");
    assert.match(run.stderr, stderr, args.join(" "));
  }
});

test("auth --help and auth login --help explain every subcommand and where the credentials are", async () => {
  for (const args of [["--help"], ["login", "--help"]]) {
    const run = await auth({}, ...args);
    assert.equal(run.code, 0, run.stderr);
    for (const sub of ["login", "token", "status", "logout"])
      assert.match(run.stdout, new RegExp(`usage: .*platform-api auth ${sub}|\\n {7}platform-api auth ${sub}`));
    assert.match(run.stdout, /\$XDG_CONFIG_HOME\/platform-api\/credentials\.json/);
    assert.match(run.stdout, /--headless/);
  }
});
