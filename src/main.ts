import { ConfigError, loadConfig } from "./config.js";
import { startServer } from "./server/app.js";
import { openSqliteStore } from "./store/sqlite/index.js";

/** `platform-api serve`: start the server and stop it cleanly on SIGTERM or SIGINT. */
async function serve(): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const store = openSqliteStore({ dataDir: config.dataDir });
  const server = await startServer({ config, store });
  const stop = (signal: string) => {
    server.app.log.info({ signal }, "shutting down");
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        server.app.log.error({ err }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.once("SIGTERM", () => stop("SIGTERM"));
  process.once("SIGINT", () => stop("SIGINT"));
}

const command = process.argv[2] ?? "serve";
if (command === "serve") {
  await serve();
} else {
  process.stderr.write(`unknown command: ${command}\nusage: platform-api serve\n`);
  process.exit(2);
}
