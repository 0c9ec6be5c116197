/**
 * `platform-api keygen` and `sign-jwt`, the helpers for static-keys
 * identities, run as a user runs them (the compiled command): the key file
 * is private and never overwritten, the printed JWKS is public only and
 * verifies what sign-jwt signs, and bad arguments are usage errors.
 * test/readme.test.ts exchanges such a token at a real server.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { createLocalJWKSet, decodeProtectedHeader, jwtVerify, type JSONWebKeySet } from "jose";
import { checkIssuerKeys } from "../../src/domain/static-keys.js";
import { platformCli } from "../support/platform-cli.js";

const dir = mkdtempSync(join(tmpdir(), "platform-keys-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const cli = (...args: string[]) => platformCli(join(dir, "no-data"), args);
let files = 0;
const freshFile = () => join(dir, `key-${++files}.jwk`);

const SIGN = ["--issuer", "https://ci.example", "--subject", "robot", "--audience", "http://localhost:8080"];

for (const alg of ["ES256", "RS256", "EdDSA"]) {
  test(`keygen --alg ${alg}: a 0600 private JWK, a public JWKS the server accepts, and sign-jwt's tokens verify against it`, async () => {
    const file = freshFile();
    const made = await cli("keygen", "--out", file, ...(alg === "ES256" ? [] : ["--alg", alg]));
    assert.equal(made.code, 0, made.stderr);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const jwks = JSON.parse(made.stdout) as JSONWebKeySet;
    assert.equal(made.stdout.trim().split("\n").length, 1, "one line, for a shell variable");
    assert.deepEqual(checkIssuerKeys("issuer_keys", made.stdout.trim()), [], "public members only, as identities require");
    const priv = JSON.parse(readFileSync(file, "utf8")) as { d?: string; kid: string; alg: string };
    assert.equal(typeof priv.d, "string");
    assert.equal(priv.alg, alg);
    assert.equal(jwks.keys[0]!.kid, priv.kid);

    const signed = await cli("sign-jwt", "--key", file, ...SIGN, "--ttl", "120", "--claim", "repo=acme/app", "--claim", "run=7");
    assert.equal(signed.code, 0, signed.stderr);
    const token = signed.stdout.trim();
    assert.deepEqual(decodeProtectedHeader(token), { alg, typ: "JWT", kid: priv.kid });
    const { payload } = await jwtVerify(token, createLocalJWKSet(jwks), {
      issuer: "https://ci.example",
      subject: "robot",
      audience: "http://localhost:8080",
    });
    assert.equal(payload.exp! - payload.iat!, 120);
    assert.ok(Math.abs(payload.iat! - Date.now() / 1000) < 60);
    assert.equal(payload.repo, "acme/app");
    assert.equal(payload.run, 7);
  });
}

test("keygen never overwrites a file, and --kid names the key", async () => {
  const file = freshFile();
  writeFileSync(file, "precious\n");
  const res = await cli("keygen", "--out", file);
  assert.equal(res.code, 1);
  assert.match(res.stderr, /exists; not overwriting/);
  assert.equal(res.stdout, "");
  assert.equal(readFileSync(file, "utf8"), "precious\n");

  const named = freshFile();
  const ok = await cli("keygen", "--out", named, "--kid", "ci-2026");
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal((JSON.parse(ok.stdout) as JSONWebKeySet).keys[0]!.kid, "ci-2026");
});

test("bad arguments are usage errors (exit 2, the usage on stderr, nothing written)", async () => {
  const key = freshFile();
  assert.equal((await cli("keygen", "--out", key)).code, 0);
  const publicOnly = freshFile();
  writeFileSync(publicOnly, JSON.stringify((JSON.parse((await cli("keygen", "--out", freshFile())).stdout) as JSONWebKeySet).keys[0]));
  const unwritten = freshFile();
  for (const args of [
    ["keygen"],
    ["keygen", "--out", unwritten, "--alg", "HS256"],
    ["keygen", "--out", unwritten, "--bogus"],
    ["keygen", "--out", unwritten, "stray"],
    ["sign-jwt", "--key", key, "--issuer", "https://ci.example", "--subject", "robot"],
    ["sign-jwt", "--key", key, ...SIGN, "--ttl", "0"],
    ["sign-jwt", "--key", key, ...SIGN, "--ttl", "3601"],
    ["sign-jwt", "--key", key, ...SIGN, "--claim", "exp=1"],
    ["sign-jwt", "--key", key, ...SIGN, "--claim", "novalue"],
    ["sign-jwt", "--key", join(dir, "missing.jwk"), ...SIGN],
    ["sign-jwt", "--key", publicOnly, ...SIGN],
  ]) {
    const res = await cli(...args);
    assert.equal(res.code, 2, `${args.join(" ")}: ${res.stderr}`);
    assert.equal(res.stdout, "", args.join(" "));
    assert.match(res.stderr, new RegExp(`usage: platform-api ${args[0]} `), args.join(" "));
  }
  assert.ok(!existsSync(unwritten), "no key file from a refused keygen");
});
