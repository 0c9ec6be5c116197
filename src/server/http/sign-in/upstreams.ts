import type { UpstreamClient } from "../../../auth/sign-in/relying-party.js";
import type { SignInProvider } from "../../../config.js";
import { checkName } from "../../../domain/names.js";
import { isUidp, rootOf } from "../../../domain/uidp.js";
import type { IdentityProviderRecord, Store } from "../../../store/store.js";

/** What a client asked to sign in through: one organization's provider, an organization's, an operator provider, or any ("" each). */
export interface FlowScope {
  idp: string;
  org: string;
  provider: string;
}

/** An upstream provider a person may choose, as the sign-in page lists it. */
export interface UpstreamChoice {
  /** "op:<id>" or "idp:<uid>". */
  key: string;
  name: string;
}

/** Organization providers listed at most for one organization. */
const MAX_ORG_PROVIDERS = 20;

/** The upstream providers of one server: the operator's (from its file) and organizations' (from the store). */
export class Upstreams {
  constructor(
    private readonly store: Store,
    private readonly operator: readonly SignInProvider[],
  ) {}

  /** The scope from request parameters, or what is wrong with it (a sentence for an error page or error_description). */
  scopeOf(params: { get(name: string): string | null }): FlowScope | string {
    const scope = { idp: params.get("idp") ?? "", org: params.get("org") ?? "", provider: params.get("provider") ?? "" };
    if ([scope.idp, scope.org, scope.provider].filter((v) => v !== "").length > 1) return "name at most one of idp, org and provider";
    if (scope.idp !== "" && !isUidp(scope.idp)) return "idp must be an identity provider's uid";
    if (scope.org !== "" && checkName("org", scope.org).length > 0) return "org must be an organization's name";
    if (scope.provider !== "" && !/^[a-z0-9-]{1,64}$/.test(scope.provider)) return "provider must be a sign-in provider's id";
    if (scope.provider !== "" && !this.operator.some((p) => p.id === scope.provider))
      return `there is no sign-in provider ${scope.provider}`;
    return scope;
  }

  /** The providers a person may choose within scope (none: an unknown organization or provider, said the same way). */
  async choices(scope: FlowScope): Promise<UpstreamChoice[]> {
    const op = (p: SignInProvider) => ({ key: `op:${p.id}`, name: p.name });
    const idp = (p: IdentityProviderRecord) => ({ key: `idp:${p.uid}`, name: p.name });
    if (scope.provider !== "") return this.operator.filter((p) => p.id === scope.provider).map(op);
    if (scope.idp !== "") {
      const found = await this.store.identityProviders.get(scope.idp);
      return found ? [idp(found)] : [];
    }
    if (scope.org !== "") return (await this.organizationProviders(scope.org)).map(idp);
    return this.operator.map(op);
  }

  /** Whether key is one of the choices within scope. */
  async allowed(scope: FlowScope, key: string): Promise<boolean> {
    return (await this.choices(scope)).some((c) => c.key === key);
  }

  /** The client for a choice's key (null when it is gone), and the organization provider behind it. */
  async client(key: string): Promise<{ client: UpstreamClient; provider: IdentityProviderRecord | null } | null> {
    if (key.startsWith("op:")) {
      const p = this.operator.find((o) => `op:${o.id}` === key);
      if (!p) return null;
      const client = {
        key,
        issuer: p.issuer,
        clientId: p.clientId,
        clientSecret: p.clientSecret,
        scopes: p.scopes,
        pkce: true,
        operator: true,
      };
      return { client, provider: null };
    }
    if (!key.startsWith("idp:")) return null;
    const provider = await this.store.identityProviders.get(key.slice(4));
    if (!provider) return null;
    const client: UpstreamClient = {
      key,
      issuer: provider.oidc.issuer,
      clientId: provider.oidc.clientId,
      // A public client unless the organization stored a secret (write-only in the API): then client_secret_basic.
      clientSecret: provider.oidc.clientSecret,
      scopes: ["email", "profile", ...provider.oidc.additionalScopes],
      pkce: provider.oidc.pkceEnabled,
      operator: false,
      tenant: rootOf(provider.parentUid),
    };
    return { client, provider };
  }

  /** The identity providers of the root organization named name. */
  private async organizationProviders(name: string): Promise<IdentityProviderRecord[]> {
    const page = { after: null, offset: 0, limit: 1, visibleWithin: null, order: { field: "uid" as const, desc: false } };
    const orgs = await this.store.groups.list({ ...page, hierarchy: { inRoot: true }, filter: { name } });
    const org = orgs.items[0];
    if (!org) return [];
    const providers = await this.store.identityProviders.list({
      ...page,
      limit: MAX_ORG_PROVIDERS,
      hierarchy: { descendantsOf: org.uid },
      filter: {},
    });
    return providers.items;
  }
}
