/** `platform-api admin-token`: a token for the built-in administrator, minted with the server's own key. */
import { adminSubject } from "../auth/authenticator.js";
import { TokenService } from "../auth/tokens.js";
import { parseCommandArgs } from "./args.js";
import type { Command } from "./command.js";
import { STORE_ENVIRONMENT, withCommandStore } from "./environment.js";

const USAGE = "usage: platform-api admin-token";

export const adminTokenCommand: Command = {
  summary: "print an API token for the built-in administrator",
  help: `${USAGE}

Prints, alone on stdout, a one-hour API token for the built-in administrator, signed with the server's current signing key, which is kept in its database. Refuses (exit 2, creating nothing) when no server has made that database. ${STORE_ENVIRONMENT}

The token's issuer and audience are the server's addresses: PLATFORM_AUTH_URL and PLATFORM_BASE_URL, by default http://localhost:PORT, or https:// when PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE are set. Run it with the server's settings, TLS ones included, or the server refuses the token (401, naming the setting).

  TOKEN=$(platform-api admin-token)`,
  async run(args) {
    parseCommandArgs(args, USAGE);
    return withCommandStore(async (store, cfg) => {
      const tokens = await TokenService.open(store.keys, { issuer: cfg.authUrl, audience: cfg.baseUrl });
      process.stdout.write(`${(await tokens.mint(await adminSubject(store.keys))).token}\n`);
      return 0;
    });
  },
};
