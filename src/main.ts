import { runCli } from "./cli/index.js";

const code = await runCli(process.argv.slice(2));
// A failed command exits now: in a worker process the cluster channel would otherwise keep it alive.
if (code !== 0) process.exit(code);
