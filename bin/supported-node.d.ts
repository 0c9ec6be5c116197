/** Whether this Node.js version (x.y.z) is one the server supports (package.json's engines). */
export function supportedNode(version: string): boolean;
