// The Node.js versions the command runs on: package.json's engines (^22.14.0 || >=24.0.0), as plain code the
// oldest node can run before anything else loads (test/cli/runtime-smoke.test.ts holds the two together).

/** Whether this Node.js version (x.y.z) is one the server supports. */
export function supportedNode(version) {
  const [major, minor] = version.split(".").map(Number);
  return major >= 24 || (major === 22 && minor >= 14);
}
