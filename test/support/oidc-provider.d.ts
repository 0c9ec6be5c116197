/** The little of oidc-provider 9 (which ships no types) that test/support/upstream-oidc.ts uses. */
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  interface ProviderContext {
    path: string;
    method: string;
    body: unknown;
    oidc: {
      provider: Provider;
      client?: { clientId: string };
      session?: { accountId?: string };
      params?: Record<string, unknown>;
    };
  }

  class Grant {
    constructor(init: { clientId: string; accountId: string });
    addOIDCScope(scope: string): void;
    addOIDCClaims(claims: string[]): void;
    save(): Promise<string>;
  }

  export default class Provider {
    constructor(issuer: string, configuration: Record<string, unknown>);
    Grant: typeof Grant;
    use(middleware: (ctx: ProviderContext, next: () => Promise<void>) => Promise<void>): void;
    callback(): (req: IncomingMessage, res: ServerResponse) => void;
  }
}
