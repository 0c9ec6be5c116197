/**
 * What a registry token grants, and the token itself. A client asks for
 * scopes (`repository:<path>:pull,push`); each requested action is granted
 * exactly when the caller's role bindings give the capabilities it needs at
 * the repository's group (the organization its path names, mapping.ts).
 * What is not granted is left out of the token's `access`, whether or not
 * the repository exists, and Distribution then answers 401/403 itself.
 */
import { randomBytes } from "node:crypto";
import { SignJWT } from "jose";
import { Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import type { Authorizer } from "../auth/authorizer.js";
import type { Principal } from "../auth/principal.js";
import { invalidField, UnavailableError } from "../domain/errors.js";
import type { Store } from "../store/store.js";
import type { RegistryKeys } from "./keys.js";
import { findRepo, registryRepository } from "./mapping.js";

/** A registry token's lifetime: a pull or push asks again when it runs out. */
export const REGISTRY_TOKEN_LIFETIME_SECONDS = 300;
/** Scopes one token request may name: a push of an image with mounts names a few, never dozens. */
export const MAX_SCOPES = 8;
/** The longest scope accepted: the longest repository path and every action. */
export const MAX_SCOPE_LENGTH = 512;

/** The actions this server grants, and the capabilities each needs at the repository's group. */
export const ACTION_CAPABILITIES = {
  pull: [Capability.CAP_REPO_BLOBS_GET],
  // The registry.push bundle's manifest and tag writes; repo.create too while the repo does not exist yet.
  push: [Capability.CAP_MANIFEST_CREATE, Capability.CAP_MANIFEST_UPDATE, Capability.CAP_TAG_CREATE, Capability.CAP_TAG_UPDATE],
  delete: [Capability.CAP_MANIFEST_DELETE],
} as const satisfies Record<string, readonly Capability[]>;

type Action = keyof typeof ACTION_CAPABILITIES;
const ACTIONS = Object.keys(ACTION_CAPABILITIES) as Action[];

/** One requested scope, parsed. */
export interface RequestedScope {
  type: string;
  name: string;
  actions: string[];
}

/** One entry of a token's `access` claim (Distribution's ResourceActions). */
/**
 * One `access` claim: a repository's granted actions, or the registry's
 * catalogue (`registry:catalog:*`, which only the server's own reconcile
 * asks for; the token endpoint never grants it).
 */
export type AccessEntry = { type: "repository"; name: string; actions: Action[] } | { type: "registry"; name: "catalog"; actions: ["*"] };

/**
 * Parses the `scope` query values: at most MAX_SCOPES, each
 * `type:name:actions` of at most MAX_SCOPE_LENGTH characters (the name may
 * not itself hold ":", as no repository path does). Throws
 * InvalidArgumentError otherwise; says nothing about any repository.
 */
export function parseScopes(values: readonly string[]): RequestedScope[] {
  if (values.length > MAX_SCOPES) throw invalidField("scope", `at most ${MAX_SCOPES} scopes per token request`);
  return values.map((scope) => {
    if (scope.length > MAX_SCOPE_LENGTH) throw invalidField("scope", `each scope is at most ${MAX_SCOPE_LENGTH} characters`);
    const parts = scope.split(":");
    if (parts.length !== 3 || parts[0] === "" || parts[1] === "") {
      throw invalidField("scope", "each scope must be <type>:<name>:<actions>, as repository:<org uid>/<repo>:pull,push");
    }
    return { type: parts[0]!, name: parts[1]!, actions: parts[2]!.split(",").filter((a) => a !== "") };
  });
}

/**
 * The access a principal is granted for the requested scopes: repository
 * scopes whose path maps to a repo name in an organization, with the
 * actions the principal's capabilities at that organization allow; scopes
 * of the same repository merged. Anything else (another resource type, a
 * path naming no organization, an unknown action) is granted nothing.
 */
export async function grantedAccess(
  deps: { store: Store; authz: Authorizer },
  principal: Principal,
  scopes: readonly RequestedScope[],
): Promise<AccessEntry[]> {
  const wanted = new Map<string, Set<Action>>();
  for (const scope of scopes) {
    if (scope.type !== "repository" || registryRepository(scope.name) === null) continue;
    const actions = wanted.get(scope.name) ?? new Set<Action>();
    for (const a of scope.actions) if ((ACTIONS as string[]).includes(a)) actions.add(a as Action);
    wanted.set(scope.name, actions);
  }
  const access: AccessEntry[] = [];
  for (const [name, actions] of wanted) {
    const repository = registryRepository(name)!;
    const held = await deps.authz.capabilitiesAt(principal, repository.orgUid);
    const allowed = (caps: readonly Capability[]) => principal.admin || caps.every((c) => held.has(c));
    const granted: Action[] = [];
    for (const action of ACTIONS) {
      if (!actions.has(action) || !allowed(ACTION_CAPABILITIES[action])) continue;
      // Only a caller who may push anyway learns, by being refused, that the repo is new and repo.create is missing.
      if (action === "push" && !allowed([Capability.CAP_REPO_CREATE]) && (await findRepo(deps.store, repository)) === null) continue;
      granted.push(action);
    }
    if (granted.length > 0) access.push({ type: "repository", name, actions: granted });
  }
  return access;
}

/** The answer of the token endpoint (Distribution's token spec; access_token for OAuth 2 clients). */
export interface RegistryTokenAnswer {
  token: string;
  access_token: string;
  expires_in: number;
  issued_at: string;
}

/**
 * Signs the registry token: ES256 with the current signing key, `kid` its
 * libtrust fingerprint (found in the bundle), iss and aud as the registry's
 * auth.token configures them, sub the identity, five minutes, and access.
 */
export async function signRegistryToken(
  keys: RegistryKeys,
  claims: { issuer: string; service: string; subject: string; access: AccessEntry[] },
  now: number,
): Promise<RegistryTokenAnswer> {
  const signer = await keys.signer();
  if (!signer) throw new UnavailableError("no signing key: the newest key is retired; run `platform-api rotate-key`");
  const iat = Math.floor(now / 1000);
  const token = await new SignJWT({ access: claims.access })
    .setProtectedHeader({ alg: "ES256", typ: "JWT", kid: signer.kid })
    .setIssuer(claims.issuer)
    .setAudience(claims.service)
    .setSubject(claims.subject)
    .setIssuedAt(iat)
    .setNotBefore(iat)
    .setExpirationTime(iat + REGISTRY_TOKEN_LIFETIME_SECONDS)
    .setJti(randomBytes(12).toString("base64url"))
    .sign(signer.key);
  return {
    token,
    access_token: token,
    expires_in: REGISTRY_TOKEN_LIFETIME_SECONDS,
    issued_at: new Date(iat * 1000).toISOString(),
  };
}
