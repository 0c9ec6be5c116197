import { importAdvisories, ImportInputError } from "./advisories/import.js";
import { adminSubject } from "./auth/authenticator.js";
import { TokenService } from "./auth/tokens.js";
import { keygenCommand, signJwtCommand } from "./cli-keys.js";
import { signingKeyCommands } from "./cli-signing-keys.js";
import { ConfigError, environmentHelp, loadConfig, type Config } from "./config.js";
import { FailedPreconditionError } from "./domain/errors.js";
import { isUidp } from "./domain/uidp.js";
import { PACKAGE_VERSION } from "./package-root.js";
import { prepareStore, startServer } from "./server/app.js";
import { checkTlsFiles } from "./server/http/tls.js";
import { StartupError, systemErrorCode } from "./startup-error.js";
import { copyStore } from "./store/copy.js";
import { openStore as openConfiguredStore, openEngine } from "./store/open.js";
import { requireDatabase } from "./store/sqlite/data-dir.js";
import { openSqliteStore } from "./store/sqlite/index.js";
import type { Store } from "./store/store.js";
import { isWorker, onCloseNow, runPrimary } from "./workers.js";

export interface Command {
  summary: string;
  help: string;
  run(args: string[]): Promise<number>;
}

const ENVIRONMENT = "It reads the same environment as the server (PLATFORM_DATA_DIR, PORT, PLATFORM_BASE_URL, PLATFORM_AUTH_URL).";

function config(): Config {
  try {
    return loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

/**
 * The configured store: PostgreSQL at PLATFORM_DATABASE_URL when set, else
 * SQLite in the data directory, with its permission check unless the
 * operator opted out. Only `serve` creates a database; every other command
 * opens the one a server made, or refuses.
 */
function openStore(cfg: Config, create = false): Promise<Store> {
  return openConfiguredStore({
    databaseUrl: cfg.databaseUrl,
    dataDir: cfg.dataDir,
    checkPermissions: !cfg.skipPermissionCheck,
    existing: !create,
    cacheBytes: cfg.cacheBytes,
  });
}

/** The listener could not bind: one line naming the address and the cause. */
function listenError(err: unknown, cfg: Config): unknown {
  const code = systemErrorCode(err);
  const where = `${cfg.host}:${cfg.port}`;
  if (code === "EADDRINUSE")
    return new StartupError(`port ${cfg.port} is already in use (${where}, EADDRINUSE); stop what holds it or set PORT`);
  if (code === "EACCES") return new StartupError(`not allowed to listen on ${where} (EACCES); ports below 1024 need privileges: set PORT`);
  if (code === "EADDRNOTAVAIL")
    return new StartupError(`cannot listen on ${where}: HOST is not an address of this machine (EADDRNOTAVAIL)`);
  return err;
}

const COMMANDS: Record<string, Command> = {
  serve: {
    summary: "start the server (the default command)",
    help: `Starts the server on PORT, serving REST, gRPC, Connect and gRPC-Web; with PLATFORM_WORKERS=N, N worker processes share the port. SIGTERM or SIGINT stops it gracefully: /readyz and gRPC health answer NOT_SERVING for PLATFORM_DRAIN_MS while calls are still served, then the listener closes and calls in flight have PLATFORM_SHUTDOWN_GRACE_MS to finish; a second signal skips the rest of the drain. With PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE the port serves TLS, and SIGHUP (or a change to either file) re-reads them. It creates the database on first start. Start-up problems (an invalid setting, a port in use, an unusable data directory or database) print one line and exit 2.

environment (name=default):
${environmentHelp()}`,
    async run() {
      const cfg = config();
      if (cfg.workers > 1 && !isWorker()) {
        // The schema is migrated and the keys made once, here, before the workers start, so they never race to.
        const store = await openStore(cfg, true);
        try {
          await prepareStore(store, Date.now());
        } finally {
          await store.close();
        }
        // Checked once here, or each worker would print the same start-up error.
        if (cfg.tls) checkTlsFiles(cfg.tls);
        return runPrimary(cfg.workers, { reloadOnSighup: cfg.tls !== undefined });
      }
      const store = await openStore(cfg, true);
      const server = await startServer({ config: cfg, store }).catch(async (err: unknown) => {
        await store.close().catch(() => {});
        throw listenError(err, cfg);
      });
      // A second signal skips the rest of the drain. A worker takes that from its primary only: the one
      // Ctrl-C or systemd stop reaches every process of the group, so a worker sees each signal twice.
      let signals = 0;
      const stop = (signal: string) => {
        if (++signals > 1) {
          if (!isWorker()) void server.close();
          return;
        }
        server.app.log.info({ signal }, "shutting down");
        server.close().then(
          () => process.exit(0),
          (err: unknown) => {
            server.app.log.error({ err }, "shutdown failed");
            process.exit(1);
          },
        );
      };
      process.on("SIGTERM", () => stop("SIGTERM"));
      process.on("SIGINT", () => stop("SIGINT"));
      if (isWorker()) onCloseNow(() => void server.close());
      // SIGHUP re-reads the certificate (from the primary, in a worker); without TLS it keeps its default meaning.
      if (cfg.tls) process.on("SIGHUP", () => server.reloadTls("SIGHUP"));
      return new Promise<number>(() => {});
    },
  },
  "admin-token": {
    summary: "print an API token for the built-in administrator",
    help: `Prints, alone on stdout, a one-hour API token for the built-in administrator, signed with the key in PLATFORM_DATA_DIR. Refuses (exit 2, creating nothing) when no server has made a database there. ${ENVIRONMENT}\n\n  TOKEN=$(platform-api admin-token)`,
    async run() {
      const cfg = config();
      const store = await openStore(cfg);
      try {
        const tokens = await TokenService.open(store.keys, { issuer: cfg.authUrl, audience: cfg.baseUrl });
        process.stdout.write(`${(await tokens.mint(await adminSubject(store.keys))).token}\n`);
      } finally {
        await store.close();
      }
      return 0;
    },
  },
  ...signingKeyCommands(() => openStore(config()), ENVIRONMENT),
  "migrate-to-postgres": {
    summary: "copy an SQLite deployment's data into PostgreSQL",
    help: `usage: PLATFORM_DATABASE_URL=postgres://… platform-api migrate-to-postgres

Copies everything in the SQLite database of PLATFORM_DATA_DIR (groups, identities, roles, role bindings, identity providers, account associations, invites, repos, tags, advisories, the signing keys and the server's secrets) into the PostgreSQL database at PLATFORM_DATABASE_URL, in one transaction, keeping every uid and time: tokens issued before keep working, and the administrator stays the administrator. Stop the server first. The target must be a fresh database (migrated but with no groups or identities, and no server run on it). Prints the counts. Exits 0 when copied, 1 when the target is not empty or when source rows hold a NUL character, which PostgreSQL cannot store (each such row named on one line: table, uid, field), 2 on usage errors.`,
    async run() {
      const cfg = config();
      if (cfg.databaseUrl === "") {
        process.stderr.write("PLATFORM_DATABASE_URL must name the target PostgreSQL database\n");
        return 2;
      }
      requireDatabase(cfg.dataDir);
      const source = openSqliteStore({ dataDir: cfg.dataDir, checkPermissions: !cfg.skipPermissionCheck });
      try {
        const target = await openEngine({ databaseUrl: cfg.databaseUrl, dataDir: cfg.dataDir });
        try {
          const counts = await copyStore(source, target);
          for (const [kind, n] of Object.entries(counts)) process.stdout.write(`${kind}: ${n}\n`);
          return 0;
        } catch (err) {
          if (!(err instanceof FailedPreconditionError)) throw err;
          // One line per problem (each unstorable row names its table, uid and field), no stack trace.
          const problems = err.preconditionViolations.map((v) => v.description);
          process.stderr.write(`${(problems.length > 0 ? problems : [err.message]).join("\n")}; nothing was copied\n`);
          return 1;
        } finally {
          await target.close();
        }
      } finally {
        await source.close();
      }
    },
  },
  "import-advisories": {
    summary: "import OSV vulnerability records as advisories of a group",
    help: `usage: platform-api import-advisories --group <uid> <file-or-dir>...

Reads OSV JSON records (each file given, and every *.json below each directory given) and writes one advisory per record and affected package into the group, in PLATFORM_DATA_DIR (the server may be running). A re-import updates what changed and leaves the rest unchanged; it never duplicates. Malformed records are reported as "<file>: <id or ?>: <problem>" on stderr and skipped. Prints the counts of advisories created, updated and unchanged, and of records skipped. Exits 0 when everything importable was imported, 1 when the group does not exist, 2 on usage errors. ${ENVIRONMENT}`,
    async run(args) {
      const parsed = importArgs(args);
      if (typeof parsed === "string") {
        process.stderr.write(`${parsed}\nusage: platform-api import-advisories --group <uid> <file-or-dir>...\n`);
        return 2;
      }
      const cfg = config();
      const store = await openStore(cfg);
      try {
        if (!(await store.groups.get(parsed.group))) {
          process.stderr.write(`group ${parsed.group} does not exist\n`);
          return 1;
        }
        const result = await importAdvisories(store, parsed.group, parsed.paths, Date.now());
        for (const p of result.problems) process.stderr.write(`${p.file}: ${p.id ?? "?"}: ${p.problem}\n`);
        process.stdout.write(
          `imported ${result.records} of ${result.records + result.skipped} OSV records into group ${parsed.group}\n` +
            `created: ${result.created}\nupdated: ${result.updated}\nunchanged: ${result.unchanged}\nskipped: ${result.skipped}\n`,
        );
        return 0;
      } catch (err) {
        if (!(err instanceof ImportInputError)) throw err;
        process.stderr.write(`${err.message}\n`);
        return 2;
      } finally {
        await store.close();
      }
    },
  },
  keygen: keygenCommand,
  "sign-jwt": signJwtCommand,
};

/** The arguments of import-advisories, or what is wrong with them. */
function importArgs(args: string[]): { group: string; paths: string[] } | string {
  let group: string | undefined;
  const paths: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--group") group = args[++i];
    else if (arg.startsWith("--group=")) group = arg.slice("--group=".length);
    else if (arg.startsWith("-")) return `unknown option ${arg}`;
    else paths.push(arg);
  }
  if (group === undefined || group === "") return "--group <uid> is required";
  if (!isUidp(group)) return `--group ${group}: not a group uid`;
  if (paths.length === 0) return "give at least one OSV file or directory";
  return { group, paths };
}

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return `usage: platform-api [command] [--help]\n\ncommands:\n${lines.join("\n")}\n\nplatform-api --version prints the version.\n`;
}

/** Runs the command line; returns the exit code. */
export async function runCli(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === "--version" || first === "-v") {
    process.stdout.write(`${PACKAGE_VERSION}\n`);
    return 0;
  }
  if (first === "--help" || first === "-h" || first === "help") {
    process.stdout.write(usage());
    return 0;
  }
  const name = first ?? "serve";
  const command = COMMANDS[name];
  if (!command) {
    process.stderr.write(`unknown command: ${name}\n\n${usage()}`);
    return 2;
  }
  if (rest.includes("--help") || rest.includes("-h")) {
    process.stdout.write(`platform-api ${name}: ${command.summary}\n\n${command.help}\n`);
    return 0;
  }
  try {
    return await command.run(rest);
  } catch (err) {
    // What the operator must fix (a data directory we must not use, a port in use…): one line, no stack.
    if (!(err instanceof StartupError)) throw err;
    process.stderr.write(`platform-api: ${err.message}\n`);
    return 2;
  }
}
