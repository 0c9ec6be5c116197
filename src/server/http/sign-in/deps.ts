import { createContextValues, type HandlerContext } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { clientAddressKey, requestIdKey } from "../../../auth/principal.js";
import { addressKey } from "../../../auth/rate-limit.js";
import type { RefreshTokens } from "../../../auth/refresh-tokens.js";
import { FLOW_LIFETIME_MS, hashOf, newHandle, newSecret } from "../../../auth/sign-in/oauth-clients.js";
import type { RelyingParty } from "../../../auth/sign-in/relying-party.js";
import type { TokenService } from "../../../auth/tokens.js";
import type { People } from "../../../services/oidc/people.js";
import type { SignInFlowRecord } from "../../../store/sign-in-store.js";
import type { Store } from "../../../store/store.js";
import type { Upstreams } from "./upstreams.js";

/** What the sign-in routes are built from. */
export interface SignInDeps {
  store: Store;
  tokens: TokenService;
  people: People;
  refreshTokens: RefreshTokens;
  rp: RelyingParty;
  upstreams: Upstreams;
  /** PLATFORM_AUTH_URL: our issuer, in metadata and RFC 9207's `iss`. */
  authUrl: string;
  /** Cookies get Secure and the __Host- prefix (PLATFORM_AUTH_URL is https, or the port serves TLS). */
  secureCookies: boolean;
  pendingPerAddress: number;
  now: () => number;
}

/** A flow record with every field empty but those given. */
export function newFlow(
  kind: SignInFlowRecord["kind"],
  req: FastifyRequest,
  now: number,
  fields: Partial<SignInFlowRecord>,
): SignInFlowRecord {
  return {
    id: newHandle(),
    kind,
    clientId: "",
    redirectUri: "",
    clientState: "",
    codeChallenge: "",
    deviceCodeHash: "",
    userCodeHash: "",
    pollInterval: 0,
    lastPollTime: 0,
    scope: { idp: "", org: "", provider: "" },
    clientAddress: req.clientAddress === "" ? "" : addressKey(req.clientAddress),
    upstreamProvider: "",
    upstreamStateHash: "",
    upstreamNonce: "",
    upstreamVerifier: "",
    browserBindingHash: "",
    status: "pending",
    identityUid: "",
    codeHash: "",
    createTime: now,
    expireTime: now + FLOW_LIFETIME_MS,
    ...fields,
  };
}

/** Stores a new flow under the per-address bound (ResourceExhaustedError past it; src/auth/sign-in-sweep.ts deletes expired ones). */
export async function createFlow(deps: SignInDeps, flow: SignInFlowRecord): Promise<void> {
  await deps.store.signInFlows.create(flow, deps.pendingPerAddress, flow.createTime);
}

/** The context registration writes its events under: the request's id and client address, no principal. */
export function registrationContext(req: FastifyRequest): HandlerContext {
  const values = createContextValues().set(requestIdKey, String(req.id)).set(clientAddressKey, req.clientAddress);
  return { values, signal: new AbortController().signal } as unknown as HandlerContext;
}

/**
 * The browser-binding cookie: a random secret per browser, HttpOnly,
 * SameSite=Lax (sent on the upstream's top-level redirect back, not on
 * another site's POST), Secure with the __Host- prefix under TLS. A flow
 * holds its hash: a callback, a page or a confirmation from a browser
 * without it is refused (login CSRF, a flow handle passed to another person).
 */
export class BrowserBinding {
  readonly name: string;

  constructor(private readonly secure: boolean) {
    this.name = secure ? "__Host-platform-sign-in" : "platform-sign-in";
  }

  /** The secret the request's cookie holds, or null. */
  read(req: FastifyRequest): string | null {
    for (const part of (req.headers.cookie ?? "").split(";")) {
      const [name, value] = part.trim().split("=", 2);
      if (name === this.name && value !== undefined && /^[A-Za-z0-9_-]{43}$/.test(value)) return value;
    }
    return null;
  }

  /** The request's secret, or a new one set on the reply. */
  ensure(req: FastifyRequest, reply: FastifyReply): string {
    const secret = this.read(req) ?? newSecret();
    const attributes = `Path=/; Max-Age=${FLOW_LIFETIME_MS / 1000}; HttpOnly; SameSite=Lax${this.secure ? "; Secure" : ""}`;
    reply.header("set-cookie", `${this.name}=${secret}; ${attributes}`);
    return secret;
  }

  /** Whether the request's browser is the one whose secret hashes to hash. */
  matches(req: FastifyRequest, hash: string): boolean {
    const secret = this.read(req);
    return secret !== null && hash !== "" && hashOf(secret) === hash;
  }

  /** The token a form of this browser carries for purpose (login CSRF: another site can neither read nor compute it). */
  formToken(secret: string, purpose: string): string {
    return hashOf(`${purpose}:${secret}`);
  }

  /** Whether the request's form token for purpose is this browser's. */
  formTokenMatches(req: FastifyRequest, purpose: string, token: string | null): boolean {
    const secret = this.read(req);
    return secret !== null && token !== null && token === this.formToken(secret, purpose);
  }
}
