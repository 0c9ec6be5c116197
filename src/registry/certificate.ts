/**
 * A self-signed X.509 certificate for one of our ES256 signing keys, and the
 * libtrust key id Distribution gives the key inside it. Distribution's token
 * auth reads `auth.token.rootcertbundle` as PEM certificates and trusts each
 * one's public key under its libtrust fingerprint; a token whose `kid`
 * header is that fingerprint is verified with that key (Distribution 2.8's
 * registry/auth/token: x5c chain, jwk header or kid). Only the public key
 * matters on that path, so the certificate is the smallest one Go's
 * x509.ParseCertificate accepts: v3, no extensions, self-signed.
 *
 * Written here in about sixty lines of DER rather than with a package: the
 * maintained X.509 package for WebCrypto keys (@peculiar/x509 2.2) requires
 * a global reflect-metadata polyfill, and openssl would need the private key
 * written to disk. Node's X509Certificate parses the result in the tests,
 * and the real registry verifies tokens against it.
 */
import { createHash, createPrivateKey, createPublicKey, randomBytes, sign, type JsonWebKey } from "node:crypto";

/** A DER element: tag, length, content. */
function der(tag: number, ...content: Buffer[]): Buffer {
  const body = Buffer.concat(content);
  const n = body.length;
  const length = n < 0x80 ? Buffer.from([n]) : n < 0x100 ? Buffer.from([0x81, n]) : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), length, body]);
}

const SEQUENCE = 0x30;
const SET = 0x31;
/** ecdsa-with-SHA256 (1.2.840.10045.4.3.2), as an AlgorithmIdentifier with no parameters. */
const ECDSA_SHA256 = der(SEQUENCE, Buffer.from("06082a8648ce3d040302", "hex"));
/** commonName (2.5.4.3). */
const COMMON_NAME = Buffer.from("0603550403", "hex");
/** [0] EXPLICIT INTEGER 2: an X.509 v3 certificate. */
const VERSION_3 = Buffer.from("a003020102", "hex");

/** A Name of one commonName. */
const name = (cn: string) => der(SEQUENCE, der(SET, der(SEQUENCE, COMMON_NAME, der(0x0c, Buffer.from(cn, "utf8")))));

/** UTCTime until 2049, GeneralizedTime after (RFC 5280 §4.1.2.5). */
function time(ms: number): Buffer {
  const iso = new Date(ms).toISOString().replace(/[-:T]/g, "").slice(0, 14) + "Z";
  const year = new Date(ms).getUTCFullYear();
  return year < 2050 ? der(0x17, Buffer.from(iso.slice(2), "ascii")) : der(0x18, Buffer.from(iso, "ascii"));
}

/** How long a bundle certificate claims to be valid: Distribution ignores it on the kid path, other readers may not. */
const VALIDITY_MS = 20 * 365 * 86_400_000;

/** A PEM self-signed certificate for the P-256 key pair, named after kid. */
export function selfSignedCertificate(privateJwk: JsonWebKey, kid: string, notBefore: number): string {
  const privateKey = createPrivateKey({ key: privateJwk, format: "jwk" });
  const spki = createPublicKey(privateKey).export({ type: "spki", format: "der" });
  const serial = randomBytes(16);
  serial[0] = (serial[0]! & 0x7f) | 0x40; // positive and minimal: high bit clear, first byte non-zero
  const subject = name(`platform-api registry token key ${kid}`);
  const tbs = der(
    SEQUENCE,
    VERSION_3,
    der(0x02, serial),
    ECDSA_SHA256,
    subject,
    der(SEQUENCE, time(notBefore), time(notBefore + VALIDITY_MS)),
    subject,
    spki,
  );
  const signature = sign("sha256", tbs, { key: privateKey, dsaEncoding: "der" });
  const cert = der(SEQUENCE, tbs, ECDSA_SHA256, der(0x03, Buffer.from([0]), signature));
  const lines = cert.toString("base64").match(/.{1,64}/g)!;
  return `-----BEGIN CERTIFICATE-----\n${lines.join("\n")}\n-----END CERTIFICATE-----\n`;
}

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/**
 * The libtrust key id of a public key: the SHA-256 of its DER
 * SubjectPublicKeyInfo, truncated to 240 bits, base32, in twelve groups of
 * four joined by ":" (libtrust's keyIDFromCryptoKey). Distribution looks a
 * token's `kid` up by it.
 */
export function libtrustKeyId(publicJwk: JsonWebKey): string {
  const spki = createPublicKey({ key: publicJwk, format: "jwk" }).export({ type: "spki", format: "der" });
  const digest = createHash("sha256").update(spki).digest().subarray(0, 30);
  let bits = "";
  for (const byte of digest) bits += byte.toString(2).padStart(8, "0");
  let encoded = "";
  for (let i = 0; i < bits.length; i += 5) encoded += BASE32[parseInt(bits.slice(i, i + 5), 2)];
  return encoded.match(/.{4}/g)!.join(":");
}
