/**
 * PLATFORM_SIGN_IN_PROVIDERS_FILE is read at start: a good file gives the
 * providers, and every mistake is one start-up problem naming the file, the
 * provider and the field.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ConfigError, loadConfig } from "../../src/config.js";

const dir = mkdtempSync(join(tmpdir(), "providers-file-"));

/** The start-up problems of a providers file with this text ([] when it is accepted). */
function problemsOf(text: string): string[] {
  const path = join(dir, `p${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(path, text);
  try {
    loadConfig({ PLATFORM_SIGN_IN_PROVIDERS_FILE: path });
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems.map((p) => p.replace(path, "FILE"));
  }
}

const dex = { id: "dex", name: "Dex", issuer: "https://dex.example.com", clientId: "platform", clientSecret: "s3cret" };

test("a good file gives its providers, openid left to the server and email profile by default", () => {
  const secretFile = join(dir, "google.secret");
  writeFileSync(secretFile, "from-a-file\n");
  const path = join(dir, "good.json");
  const google = {
    id: "google",
    name: "Google",
    issuer: "https://accounts.google.com",
    clientId: "g",
    clientSecretFile: secretFile,
    scopes: ["openid", "email"],
  };
  writeFileSync(path, JSON.stringify([dex, google]));
  const config = loadConfig({ PLATFORM_SIGN_IN_PROVIDERS_FILE: path });
  assert.deepEqual(config.signInProviders, [
    { ...dex, scopes: ["email", "profile"] },
    { id: "google", name: "Google", issuer: "https://accounts.google.com", clientId: "g", clientSecret: "from-a-file", scopes: ["email"] },
  ]);
  assert.deepEqual(loadConfig({}).signInProviders, []);
});

test("each mistake is one problem naming the provider and the field", () => {
  assert.deepEqual(problemsOf("{"), [
    `PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: is not JSON (Expected property name or '}' in JSON at position 1 (line 1 column 2))`,
  ]);
  assert.match(problemsOf("{}")[0]!, /must be a JSON list of providers/);
  assert.deepEqual(
    problemsOf(
      JSON.stringify([
        { ...dex, id: "Bad Id" },
        { ...dex, issuer: "http://dex.example.com" },
        { ...dex, clientSecret: undefined },
        { ...dex, clientSecretFile: "/x" },
        { ...dex, scopes: "email" },
        { ...dex, secret: "typo" },
        dex,
        dex,
      ]),
    ),
    [
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 1: id must be 1 to 32 lowercase letters, digits and dashes",
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 2: issuer must use https (http only on 127.0.0.1, [::1] or localhost): the client secret is sent to it",
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 3: set exactly one of clientSecret and clientSecretFile",
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 4: set exactly one of clientSecret and clientSecretFile",
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 5: scopes must be a list of at most 20 scope names",
      'PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 6: unknown field "secret"',
      "PLATFORM_SIGN_IN_PROVIDERS_FILE=FILE: provider 8: id dex is used by an earlier provider",
    ],
  );
  assert.match(
    problemsOf(JSON.stringify([{ ...dex, clientSecret: undefined, clientSecretFile: "/nonexistent" }]))[0]!,
    /cannot be read \(ENOENT\)/,
  );
  assert.match(problemsOf(JSON.stringify([{ ...dex, issuer: "https://dex.example.com/?q" }]))[0]!, /must be a canonical URL/);
  assert.deepEqual(problemsOf(JSON.stringify([{ ...dex, issuer: "http://127.0.0.1:5556/dex" }])), []);
});

test("a file that cannot be read is a problem", () => {
  assert.throws(() => loadConfig({ PLATFORM_SIGN_IN_PROVIDERS_FILE: join(dir, "missing.json") }), /cannot be read \(ENOENT\)/);
});
