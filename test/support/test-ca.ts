import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** A throwaway certificate authority and a server certificate it signed, as files and bytes. */
export interface TestCa {
  /** The CA certificate (PEM): what clients trust (curl --cacert, grpc credentials.createSsl). */
  caFile: string;
  /** The server certificate (PEM) for localhost, 127.0.0.1 and ::1, signed by the CA. */
  certFile: string;
  /** The server certificate's private key (PEM, unencrypted). */
  keyFile: string;
  /** The CA certificate's bytes, for Node clients (`{ ca }` options). */
  ca: Buffer;
  /** The server certificate's bytes. */
  cert: Buffer;
  /** The server key's bytes. */
  key: Buffer;
  /** The server certificate chained with its key, in one PEM file (HAProxy's `crt` wants both together). */
  pemBundleFile: string;
}

/**
 * Makes a fresh CA and a server certificate for localhost/127.0.0.1/::1 in
 * dir with the openssl CLI, the way an operator would, so proxies and the
 * server read real files. Keys are EC P-256 (fast to make) and certificates
 * live 2 days: nothing here is ever trusted outside the test that made it.
 * Calling it twice with the same dir makes a new CA over the old files.
 */
export function createTestCa(dir: string): TestCa {
  mkdirSync(dir, { recursive: true });
  const caKey = join(dir, "ca.key");
  const caFile = join(dir, "ca.crt");
  const keyFile = join(dir, "server.key");
  const csrFile = join(dir, "server.csr");
  const certFile = join(dir, "server.crt");
  const extFile = join(dir, "server.ext");
  const pemBundleFile = join(dir, "server.pem");
  const openssl = (...args: string[]) => execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });

  openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", caKey);
  openssl(
    "req",
    "-x509",
    "-new",
    "-key",
    caKey,
    "-sha256",
    "-days",
    "2",
    "-subj",
    "/CN=platform test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
    "-out",
    caFile,
  );
  openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", keyFile);
  openssl("req", "-new", "-key", keyFile, "-subj", "/CN=localhost", "-out", csrFile);
  writeFileSync(
    extFile,
    [
      "basicConstraints=CA:FALSE",
      "keyUsage=critical,digitalSignature,keyEncipherment",
      "extendedKeyUsage=serverAuth",
      "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1",
      "",
    ].join("\n"),
  );
  openssl(
    "x509",
    "-req",
    "-in",
    csrFile,
    "-CA",
    caFile,
    "-CAkey",
    caKey,
    "-CAcreateserial",
    "-days",
    "2",
    "-sha256",
    "-extfile",
    extFile,
    "-out",
    certFile,
  );
  const cert = readFileSync(certFile);
  const key = readFileSync(keyFile);
  writeFileSync(pemBundleFile, Buffer.concat([cert, key]));
  return { caFile, certFile, keyFile, ca: readFileSync(caFile), cert, key, pemBundleFile };
}
