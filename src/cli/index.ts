/**
 * The `platform-api` command line: a table of commands, each imported only
 * when it runs or explains itself, so `--version`, `--help`, `keygen`,
 * `sign-jwt` and `admin-token` start without loading the server
 * (bench/cli-start.ts measures them).
 */
import { PACKAGE_VERSION } from "../package-root.js";
import { StartupError } from "../startup-error.js";
import { CURRENT_SCHEMA } from "../store/schema-releases.js";
import { UsageError } from "./args.js";
import { BUILD_COMMIT } from "./build-info.js";
import type { Command } from "./command.js";

/** A command in the table: its summary for the listing, and its module, imported on use. */
interface CommandEntry {
  summary: string;
  load(): Promise<Command>;
}

const COMMANDS: Record<string, CommandEntry> = {
  serve: {
    summary: "start the server (the default command)",
    load: async () => (await import("./serve.js")).serveCommand,
  },
  "admin-token": {
    summary: "print an API token for the built-in administrator",
    load: async () => (await import("./admin-token.js")).adminTokenCommand,
  },
  "rotate-key": {
    summary: "add a new token-signing key (and retire a compromised one with --retire)",
    load: async () => (await import("./signing-keys.js")).rotateKeyCommand,
  },
  "retire-key": {
    summary: "retire a token-signing key now: its tokens stop verifying",
    load: async () => (await import("./signing-keys.js")).retireKeyCommand,
  },
  "list-keys": {
    summary: "list the token-signing keys and where each is in its life",
    load: async () => (await import("./signing-keys.js")).listKeysCommand,
  },
  "registry-bundle": {
    summary: "print the certificate bundle a registry needs to trust this server's registry tokens",
    load: async () => (await import("./registry-bundle.js")).registryBundleCommand,
  },
  "migrate-to-postgres": {
    summary: "copy an SQLite deployment's data into PostgreSQL",
    load: async () => (await import("./migrate-to-postgres.js")).migrateToPostgresCommand,
  },
  backup: {
    summary: "write a consistent copy of the SQLite database to a file, while the server runs",
    load: async () => (await import("./backup.js")).backupCommand,
  },
  "import-advisories": {
    summary: "import OSV vulnerability records as advisories of a group",
    load: async () => (await import("./import-advisories.js")).importAdvisoriesCommand,
  },
  "registry-reconcile": {
    summary: "repair the registry catalogue (repos, tags) from what the registry holds",
    load: async () => (await import("./registry-reconcile.js")).registryReconcileCommand,
  },
  keygen: {
    summary: "make a key pair for a static-keys identity: private JWK to a file, public JWKS on stdout",
    load: async () => (await import("./static-keys.js")).keygenCommand,
  },
  "sign-jwt": {
    summary: "sign a short-lived JWT with a private JWK (a static-keys identity's token to exchange)",
    load: async () => (await import("./static-keys.js")).signJwtCommand,
  },
  auth: {
    summary: "sign in as a person and print API tokens for curl, buf curl and gRPC (login, token, status, logout)",
    load: async () => (await import("./auth/index.js")).authCommand,
  },
};

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return `usage: platform-api [command] [--help]\n\ncommands:\n${lines.join("\n")}\n\nplatform-api --version prints the version, the commit it was built from and the schema versions it migrates to.\n`;
}

/**
 * What `--version` prints: the version, the commit (builds between two versions say the same version) and the
 * schema of each engine (what a rollback to this binary needs), e.g.
 * `platform-api 0.3.0 (commit 1339023; schema SQLite 13, PostgreSQL 8)`.
 */
function versionLine(): string {
  const schema = `schema SQLite ${CURRENT_SCHEMA.sqlite}, PostgreSQL ${CURRENT_SCHEMA.postgres}`;
  return `platform-api ${PACKAGE_VERSION} (commit ${BUILD_COMMIT ?? "unknown"}; ${schema})\n`;
}

/** Runs the command line; returns the exit code. */
export async function runCli(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === "--version" || first === "-v") {
    process.stdout.write(versionLine());
    return 0;
  }
  if (first === "--help" || first === "-h" || first === "help") {
    process.stdout.write(usage());
    return 0;
  }
  const name = first ?? "serve";
  const entry = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!entry) {
    process.stderr.write(`${name.startsWith("-") ? "unknown option" : "unknown command"}: ${name}\n\n${usage()}`);
    return 2;
  }
  const command = await entry.load();
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(`platform-api ${name}: ${command.summary}\n\n${command.help}\n`);
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (err) {
    // A command line the command cannot run: what is wrong, then how to call it.
    if (err instanceof UsageError) {
      process.stderr.write(`platform-api ${name}: ${err.message}\n${err.usage}\n`);
      return 2;
    }
    // What the operator must fix (a data directory we must not use, a port in use…): one line, no stack.
    if (!(err instanceof StartupError)) throw err;
    process.stderr.write(`platform-api: ${err.message}\n`);
    return 2;
  }
}
