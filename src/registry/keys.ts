/**
 * The keys that sign registry tokens: this server's own signing keys (the
 * store's signing_keys, shared by every process and both backends), so they
 * rotate with `platform-api rotate-key` and a retired key stops at once.
 * The newest key signs; the bundle the registry trusts holds a certificate
 * for every key that still verifies (key-lifecycle.ts), printed by
 * `platform-api registry-bundle`.
 */
import { createPrivateKey, type JsonWebKey, type KeyObject } from "node:crypto";
import { keyStatuses, verifiesAt } from "../auth/key-lifecycle.js";
import type { KeyStore } from "../store/store.js";
import { libtrustKeyId, selfSignedCertificate } from "./certificate.js";

/** The key that signs registry tokens now, and the kid Distribution knows it by. */
export interface RegistrySigner {
  /** The libtrust fingerprint of its public key: the token's `kid` header. */
  kid: string;
  key: KeyObject;
}

/** The longest a signer is trusted without re-reading the keys when the store's version did not move (as tokens.ts). */
const MAX_AGE_MS = 60_000;

/** The current registry signer, read again whenever the store's version of signing_keys moves. */
export class RegistryKeys {
  private loaded: { signer: RegistrySigner | null; version: number; loadedAt: number; sourceKid: string } | null = null;

  constructor(
    private readonly keys: KeyStore,
    private readonly keysVersion: () => number,
    private readonly now: () => number = Date.now,
  ) {}

  /** The signer, or null when the newest key is retired (nothing is signed then, as for API tokens). */
  async signer(): Promise<RegistrySigner | null> {
    const version = this.keysVersion();
    const now = this.now();
    const loaded = this.loaded;
    if (loaded && loaded.version >= version && now - loaded.loadedAt < MAX_AGE_MS) return loaded.signer;
    const newest = (await this.keys.signingKeys()).at(-1);
    let signer: RegistrySigner | null = null;
    if (newest && newest.retireTime === undefined) {
      signer =
        loaded?.sourceKid === newest.kid && loaded.signer
          ? loaded.signer
          : {
              kid: libtrustKeyId(JSON.parse(newest.publicJwk) as JsonWebKey),
              key: createPrivateKey({ key: JSON.parse(newest.privateJwk) as JsonWebKey, format: "jwk" }),
            };
    }
    this.loaded = { signer, version, loadedAt: now, sourceKid: newest?.kid ?? "" };
    return signer;
  }
}

/**
 * The PEM bundle for `auth.token.rootcertbundle`: one self-signed
 * certificate per key that verifies at now (the signing key and any
 * rotated-out key within its horizon), oldest first.
 */
export async function registryBundle(keys: KeyStore, now: number): Promise<string> {
  const live = keyStatuses(await keys.signingKeys(), now).filter((s) => verifiesAt(s, now));
  return live.map((s) => selfSignedCertificate(JSON.parse(s.record.privateJwk) as JsonWebKey, s.record.kid, s.record.createTime)).join("");
}
