import { constants, createHmac, sign as cryptoSign, KeyObject } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, type JWK } from "jose";

/** One signing key of the issuer: jose-generated, with its public JWK as the JWKS publishes it. */
export interface IssuerKey {
  kid: string;
  alg: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** The public JWK with kid, alg and use. */
  publicJwk: JWK;
}

/** How sign() builds a token. Every field is optional. */
export interface SignOptions {
  /** The header's alg (default: the key's alg, or RS256). */
  alg?: string;
  /** The header's kid; null leaves it out (default: the key's kid). */
  kid?: string | null;
  /**
   * The key that signs: an IssuerKey (default: the RSA key), a raw KeyObject,
   * a Buffer/string HMAC secret for HS*, or null for an empty signature.
   */
  key?: IssuerKey | KeyObject | Buffer | string | null;
  /** The header's typ; null leaves it out (default: "JWT"). */
  typ?: string | null;
  /** More header members (jku, x5u, jwk, crit, ...). */
  header?: Record<string, unknown>;
  /** Replaces the signature bytes after signing (truncate, extend, zero...). */
  signature?: (sig: Buffer) => Buffer;
}

const HASHES: Record<string, string> = { "256": "sha256", "384": "sha384", "512": "sha512" };

/** Signs data for a JWS alg with node:crypto; ECDSA signatures in the JWS raw r||s form. */
function signBytes(alg: string, key: KeyObject | Buffer | string, data: Buffer): Buffer {
  const bits = alg.slice(2);
  if (alg.startsWith("HS"))
    return createHmac(HASHES[bits]!, key as Buffer | string)
      .update(data)
      .digest();
  const k = key as KeyObject;
  if (alg === "EdDSA" || alg === "Ed25519") return cryptoSign(null, data, k);
  if (alg.startsWith("RS")) return cryptoSign(HASHES[bits]!, data, k);
  if (alg.startsWith("PS")) {
    return cryptoSign(HASHES[bits]!, data, { key: k, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: Number(bits) / 8 });
  }
  if (alg.startsWith("ES")) return cryptoSign(HASHES[bits]!, data, { key: k, dsaEncoding: "ieee-p1363" });
  throw new Error(`cannot sign ${alg}`);
}

const b64 = (value: Buffer | string) => Buffer.from(value).toString("base64url");

/** Builds a compact JWS with full control of header, payload and signature. */
export function signJwt(
  header: Record<string, unknown>,
  payload: Record<string, unknown> | string,
  key: KeyObject | Buffer | string | null,
  signature?: (sig: Buffer) => Buffer,
): string {
  const input = `${b64(JSON.stringify(header))}.${b64(typeof payload === "string" ? payload : JSON.stringify(payload))}`;
  let sig = key === null ? Buffer.alloc(0) : signBytes(String(header.alg), key, Buffer.from(input));
  if (signature) sig = signature(sig);
  return `${input}.${b64(sig)}`;
}

/** Generates a jose key pair for alg, as an IssuerKey. */
export async function generateIssuerKey(alg: string, kid: string): Promise<IssuerKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const publicJwk: JWK = { ...(await exportJWK(publicKey)), kid, alg, use: "sig" };
  return { kid, alg, privateKey: KeyObject.from(privateKey), publicKey: KeyObject.from(publicKey), publicJwk };
}

/**
 * A real OIDC issuer on loopback: node:http on 127.0.0.1 serving
 * /.well-known/openid-configuration (issuer = its own http://127.0.0.1:PORT
 * URL) and its JWKS at /jwks, with an RS256 and an ES256 key pair. Counts
 * every request by path, so tests can show what a verifier fetched.
 */
export class OidcIssuer {
  /** http://127.0.0.1:PORT, no trailing slash: the iss of its tokens. */
  readonly url: string;
  /** The RS256 key pair (kid "<name>-rsa"). */
  readonly rsa: IssuerKey;
  /** The ES256 key pair (kid "<name>-ec"). */
  readonly ec: IssuerKey;
  private published: { keys: JWK[] };
  private readonly extra = new Map<string, { status: number; type: string; body: string }>();
  private readonly hits = new Map<string, number>();

  private constructor(
    private readonly server: Server,
    port: number,
    rsa: IssuerKey,
    ec: IssuerKey,
  ) {
    this.url = `http://127.0.0.1:${port}`;
    this.rsa = rsa;
    this.ec = ec;
    this.published = { keys: [rsa.publicJwk, ec.publicJwk] };
  }

  /** Starts an issuer on a free loopback port; name prefixes its kids. */
  static async start(name = "idp"): Promise<OidcIssuer> {
    const rsa = await generateIssuerKey("RS256", `${name}-rsa`);
    const ec = await generateIssuerKey("ES256", `${name}-ec`);
    const ref: { issuer?: OidcIssuer } = {};
    const server = createServer((req, res) => ref.issuer!.handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    ref.issuer = new OidcIssuer(server, (server.address() as AddressInfo).port, rsa, ec);
    return ref.issuer;
  }

  /** URL of the JWKS, as the discovery document names it. */
  get jwksUri(): string {
    return `${this.url}/jwks`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = new URL(req.url ?? "/", this.url).pathname;
    this.hits.set(path, (this.hits.get(path) ?? 0) + 1);
    const send = (status: number, type: string, body: string) => {
      res.writeHead(status, { "content-type": type, "content-length": Buffer.byteLength(body) });
      res.end(body);
    };
    if (req.method !== "GET") return send(405, "text/plain", "method not allowed");
    if (path === "/.well-known/openid-configuration") {
      return send(
        200,
        "application/json",
        JSON.stringify({
          issuer: this.url,
          jwks_uri: this.jwksUri,
          response_types_supported: ["id_token"],
          subject_types_supported: ["public"],
          id_token_signing_alg_values_supported: ["RS256", "ES256"],
        }),
      );
    }
    if (path === "/jwks") return send(200, "application/json", JSON.stringify(this.published));
    const extra = this.extra.get(path);
    if (extra) return send(extra.status, extra.type, extra.body);
    send(404, "text/plain", "not found");
  }

  /** Serves body at path (for jku/x5u targets a verifier must never fetch). */
  route(path: string, body: string, type = "application/json", status = 200): string {
    this.extra.set(path, { status, type, body });
    return `${this.url}${path}`;
  }

  /** Publishes exactly these keys at the JWKS endpoint (rotation). */
  publish(keys: readonly (IssuerKey | JWK)[]): void {
    this.published = { keys: keys.map((k) => ("publicJwk" in k ? (k as IssuerKey).publicJwk : (k as JWK))) };
  }

  /** The JWKS document of keys as JSON text (a static-keys identity's issuerKeys). */
  static jwksText(keys: readonly IssuerKey[]): string {
    return JSON.stringify({ keys: keys.map((k) => k.publicJwk) });
  }

  /** Requests served at path so far. */
  fetches(path: string): number {
    return this.hits.get(path) ?? 0;
  }

  /** Discovery document fetches so far. */
  get discoveryFetches(): number {
    return this.fetches("/.well-known/openid-configuration");
  }

  /** JWKS fetches so far. */
  get jwksFetches(): number {
    return this.fetches("/jwks");
  }

  /** Every request served so far, by path. */
  allFetches(): Record<string, number> {
    return Object.fromEntries(this.hits);
  }

  /**
   * Signs a token with exactly these claims (nothing is added: pass iss, sub,
   * aud, iat, exp yourself, or use idToken()) and the header sign options give.
   */
  sign(claims: Record<string, unknown> | string, opts: SignOptions = {}): string {
    const key = opts.key === undefined ? this.rsa : opts.key;
    const isIssuerKey = key !== null && typeof key === "object" && "publicJwk" in key;
    const alg = opts.alg ?? (isIssuerKey ? (key as IssuerKey).alg : "RS256");
    const kid = opts.kid === undefined ? (isIssuerKey ? (key as IssuerKey).kid : undefined) : (opts.kid ?? undefined);
    const typ = opts.typ === undefined ? "JWT" : (opts.typ ?? undefined);
    const header: Record<string, unknown> = {
      alg,
      ...(typ !== undefined ? { typ } : {}),
      ...(kid !== undefined ? { kid } : {}),
      ...opts.header,
    };
    const material = key === null ? null : isIssuerKey ? (key as IssuerKey).privateKey : (key as KeyObject | Buffer | string);
    return signJwt(header, claims, material, opts.signature);
  }

  /**
   * An ID token of this issuer: iss = its URL, iat = now, exp = now + 5 min,
   * then claims on top (set a claim to undefined to leave it out).
   */
  idToken(claims: Record<string, unknown>, opts: SignOptions = {}): string {
    const now = Math.floor(Date.now() / 1000);
    const merged: Record<string, unknown> = { iss: this.url, iat: now, exp: now + 300, ...claims };
    for (const k of Object.keys(merged)) if (merged[k] === undefined) delete merged[k];
    return this.sign(merged, opts);
  }

  /** Stops listening and drops open connections. */
  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
