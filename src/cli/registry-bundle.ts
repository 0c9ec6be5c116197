/**
 * `platform-api registry-bundle`: prints the PEM certificates a registry
 * trusts for this server's registry tokens (`auth.token.rootcertbundle`,
 * docs/registry.md), from the signing keys in the store every server
 * process reads.
 */
import { registryBundle } from "../registry/keys.js";
import { parseCommandArgs } from "./args.js";
import type { Command } from "./command.js";
import { STORE_ENVIRONMENT, withCommandStore } from "./environment.js";

const BUNDLE_USAGE = "usage: platform-api registry-bundle";

export const registryBundleCommand: Command = {
  summary: "print the certificate bundle a registry needs to trust this server's registry tokens",
  help: `${BUNDLE_USAGE}

Prints, as PEM, one self-signed certificate per token-signing key that verifies now: write it to the file the registry's auth.token.rootcertbundle names (docs/registry.md). The registry reads the bundle when it starts: after \`platform-api rotate-key\`, print the bundle again and restart the registry, or the new key's tokens are refused there. Exits 0, or 1 when no key verifies (every key retired: run rotate-key). ${STORE_ENVIRONMENT}`,
  async run(args) {
    parseCommandArgs(args, BUNDLE_USAGE, {}, 0);
    return withCommandStore(async (store) => {
      const bundle = await registryBundle(store.keys, Date.now());
      if (bundle === "") {
        process.stderr.write("no signing key verifies now: start the server once, or run `platform-api rotate-key`\n");
        return 1;
      }
      process.stdout.write(bundle);
      return 0;
    });
  },
};
