/**
 * Helpers for workloads whose issuer is not online (identities with
 * staticKeys): make a key pair whose public half is registered with the
 * identity, and sign the tokens it exchanges at /sts/exchange. They touch no
 * server and no data directory.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { calculateJwkThumbprint, exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from "jose";
import { parseCommandArgs, UsageError } from "./args.js";
import type { Command } from "./command.js";

/** Algorithms keygen makes; sign-jwt also signs with any key the server accepts that names its alg. */
const KEY_ALGORITHMS = ["ES256", "RS256", "EdDSA"] as const;
/** The longest lifetime sign-jwt gives a token: these tokens are for exchanging at once, not for keeping. */
const MAX_TTL_SECONDS = 3600;
/** Claims sign-jwt sets from its own options or the clock, which --claim may not override. */
const REGISTERED_CLAIMS = ["iss", "sub", "aud", "iat", "exp", "nbf"];

const KEYGEN_USAGE = "usage: platform-api keygen --out <file> [--alg ES256|RS256|EdDSA] [--kid <key id>]";
const SIGN_USAGE =
  "usage: platform-api sign-jwt --key <file> --issuer <url> --subject <sub> --audience <aud> [--ttl <seconds>] [--claim <name>=<value>]...";

export const keygenCommand: Command = {
  summary: "make a key pair for a static-keys identity: private JWK to a file, public JWKS on stdout",
  help: `${KEYGEN_USAGE}

Makes a signing key pair for a workload whose issuer is not online. Writes the private key as a JWK (with "kid" and "alg") to <file>, which is created with mode 0600 and never overwritten, and prints the public key alone on stdout as a JWKS document, {"keys":[…]}, on one line: register that as an identity's staticKeys.issuerKeys, then sign the workload's tokens with \`platform-api sign-jwt --key <file>\`. --alg is ES256 (P-256, the default), RS256 (RSA 2048) or EdDSA (Ed25519); --kid defaults to the key's RFC 7638 thumbprint. Exits 0 when written, 1 when <file> exists or cannot be created, 2 on usage errors.

  JWKS=$(platform-api keygen --out deployer.jwk)`,
  async run(args) {
    const { values } = parseCommandArgs(args, KEYGEN_USAGE, {
      out: { type: "string" },
      alg: { type: "string", default: "ES256" },
      kid: { type: "string" },
    });
    const { out, alg, kid } = values as { out?: string; alg: string; kid?: string };
    if (out === undefined || out === "") throw new UsageError("--out <file> is required", KEYGEN_USAGE);
    if (!(KEY_ALGORITHMS as readonly string[]).includes(alg))
      throw new UsageError(`--alg ${alg}: not one of ${KEY_ALGORITHMS.join(", ")}`, KEYGEN_USAGE);
    if (kid === "") throw new UsageError("--kid must not be empty", KEYGEN_USAGE);
    const pair = await generateKeyPair(alg, { extractable: true });
    const publicJwk = await exportJWK(pair.publicKey);
    const named = { kid: kid ?? (await calculateJwkThumbprint(publicJwk)), alg, use: "sig" };
    const privateJwk = { ...(await exportJWK(pair.privateKey)), ...named };
    try {
      // "wx": an existing file (perhaps the key a registered identity trusts) is never replaced.
      writeFileSync(out, `${JSON.stringify(privateJwk)}\n`, { mode: 0o600, flag: "wx" });
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      process.stderr.write(
        code === "EEXIST" ? `${out} exists; not overwriting a key\n` : `cannot create ${out}: ${(err as Error).message}\n`,
      );
      return 1;
    }
    process.stdout.write(`${JSON.stringify({ keys: [{ ...publicJwk, ...named }] })}\n`);
    return 0;
  },
};

/** A private JWK as keygen writes it, or what is wrong with the file. */
function readPrivateJwk(path: string): JWK | string {
  let jwk: unknown;
  try {
    jwk = JSON.parse(readFileSync(path, "utf8"));
  } catch (err) {
    return `--key ${path}: ${(err as NodeJS.ErrnoException).code === undefined ? "not a JSON JWK" : (err as Error).message}`;
  }
  if (typeof jwk !== "object" || jwk === null || Array.isArray(jwk)) return `--key ${path}: not a JSON JWK`;
  const key = jwk as JWK;
  if (typeof key.d !== "string") return `--key ${path}: not a private key (no "d")`;
  if (typeof key.alg !== "string" || key.alg === "") return `--key ${path}: the JWK names no "alg"`;
  return key;
}

/** Extra claims from --claim name=value: JSON values (numbers, booleans, arrays, objects, "strings") as such, anything else as a string. */
function extraClaims(pairs: readonly string[]): Record<string, unknown> | string {
  const claims: Record<string, unknown> = {};
  for (const pair of pairs) {
    const eq = pair.indexOf("=");
    if (eq <= 0) return `--claim ${pair}: expected <name>=<value>`;
    const name = pair.slice(0, eq);
    if (REGISTERED_CLAIMS.includes(name)) return `--claim ${name}: set by sign-jwt itself (use its options)`;
    const text = pair.slice(eq + 1);
    try {
      claims[name] = JSON.parse(text);
    } catch {
      claims[name] = text;
    }
  }
  return claims;
}

export const signJwtCommand: Command = {
  summary: "sign a short-lived JWT with a private JWK (a static-keys identity's token to exchange)",
  help: `${SIGN_USAGE}

Prints, alone on stdout, a JWT signed with the private JWK in <file> (as \`platform-api keygen\` writes it; its "alg" and "kid" go into the header), carrying iss, sub and aud as given, iat now and exp --ttl seconds later (default 300, at most ${MAX_TTL_SECONDS}), plus each --claim (a JSON value, or else the text as a string; iss, sub, aud, iat, exp and nbf cannot be given that way). Exchange it at /sts/exchange for an API token of an identity whose staticKeys hold the public key and name the same issuer and subject; the audience must be the one in its staticKeys.audiences or, when that is empty, the server's auth URL (PLATFORM_AUTH_URL, by default http://localhost:<PORT>). Exits 0 when printed, 2 on usage errors or an unusable key.

  OIDC_TOKEN=$(platform-api sign-jwt --key deployer.jwk --issuer https://ci.acme.example --subject deploy --audience http://localhost:8080)`,
  async run(args) {
    const { values } = parseCommandArgs(args, SIGN_USAGE, {
      key: { type: "string" },
      issuer: { type: "string" },
      subject: { type: "string" },
      audience: { type: "string" },
      ttl: { type: "string", default: "300" },
      claim: { type: "string", multiple: true, default: [] },
    });
    const o = values as { key?: string; issuer?: string; subject?: string; audience?: string; ttl: string; claim: string[] };
    for (const name of ["key", "issuer", "subject", "audience"] as const) {
      if (o[name] === undefined || o[name] === "") throw new UsageError(`--${name} is required`, SIGN_USAGE);
    }
    const ttl = Number(o.ttl);
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_TTL_SECONDS) {
      throw new UsageError(`--ttl ${o.ttl}: a whole number of seconds from 1 to ${MAX_TTL_SECONDS}`, SIGN_USAGE);
    }
    const claims = extraClaims(o.claim);
    if (typeof claims === "string") throw new UsageError(claims, SIGN_USAGE);
    const jwk = readPrivateJwk(o.key!);
    if (typeof jwk === "string") throw new UsageError(jwk, SIGN_USAGE);
    let key: Awaited<ReturnType<typeof importJWK>>;
    try {
      key = await importJWK(jwk, jwk.alg);
    } catch (err) {
      throw new UsageError(`--key ${o.key}: unusable for ${jwk.alg}: ${(err as Error).message}`, SIGN_USAGE);
    }
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT(claims)
      .setProtectedHeader({ alg: jwk.alg!, typ: "JWT", ...(jwk.kid === undefined ? {} : { kid: jwk.kid }) })
      .setIssuer(o.issuer!)
      .setSubject(o.subject!)
      .setAudience(o.audience!)
      .setIssuedAt(now)
      .setExpirationTime(now + ttl)
      .sign(key);
    process.stdout.write(`${token}\n`);
    return 0;
  },
};
