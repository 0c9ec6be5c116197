/**
 * Signing in where no browser runs (over SSH, in a container): the device
 * authorization grant (RFC 8628). The server hands out a user code; the person
 * enters it at the verification page on any device and signs in there, while
 * this command polls the token endpoint at the interval the server asks,
 * slower by 5 s at each `slow_down`, backing off when the server cannot be
 * reached, until the sign-in is approved, refused or expired.
 */
import type { ServerCredentials } from "./credentials.js";
import { AuthCommandError } from "./error.js";
import { CLIENT_ID, postForm, refusal, requestToken, UnreachableError, type ServerMetadata } from "./server.js";

export const DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code";

/** The device authorization response (RFC 8628 §3.2). */
export interface DeviceAuthorization {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete?: string;
  /** Seconds the codes live. */
  expires_in: number;
  /** Seconds between polls (5 when the server names none). */
  interval: number;
}

/** The clock and the pause between polls: real ones by default, immediate ones in tests. */
export interface PollTiming {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realTiming: PollTiming = {
  now: () => Date.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** The longest pause between polls while the server cannot be reached (RFC 8628 §3.5's back-off). */
const MAX_BACKOFF_MS = 60_000;

/** Starts a device sign-in (RFC 8628 §3.1); scope says where to sign in (idp, org, provider: empty ones are left out). */
export async function startDeviceAuthorization(metadata: ServerMetadata, scope: Record<string, string>): Promise<DeviceAuthorization> {
  if (metadata.device_authorization_endpoint === undefined) throw new AuthCommandError("the server offers no sign-in without a browser");
  const fields: Record<string, string> = { client_id: CLIENT_ID };
  for (const [name, value] of Object.entries(scope)) if (value !== "") fields[name] = value;
  const answer = await postForm(metadata.device_authorization_endpoint, fields);
  if (answer.status !== 200) throw new AuthCommandError(`the server did not start a sign-in: ${refusal(answer)}`);
  const d = (answer.body ?? {}) as Partial<DeviceAuthorization>;
  if (
    typeof d.device_code !== "string" ||
    typeof d.user_code !== "string" ||
    typeof d.verification_uri !== "string" ||
    typeof d.expires_in !== "number" ||
    !(d.expires_in > 0)
  )
    throw new AuthCommandError("the server's device authorization answer lacks device_code, user_code, verification_uri or expires_in");
  return {
    device_code: d.device_code,
    user_code: d.user_code,
    verification_uri: d.verification_uri,
    ...(typeof d.verification_uri_complete === "string" ? { verification_uri_complete: d.verification_uri_complete } : {}),
    expires_in: d.expires_in,
    interval: typeof d.interval === "number" && d.interval >= 1 ? d.interval : 5,
  };
}

/**
 * Polls the token endpoint until the person approves (the credentials), refuses (`access_denied`) or the code
 * expires (`expired_token`, or its expires_in passed); those end in AuthCommandError.
 */
export async function pollForToken(
  metadata: ServerMetadata,
  device: DeviceAuthorization,
  timing: PollTiming = realTiming,
): Promise<ServerCredentials> {
  const expired = new AuthCommandError("the code expired before the sign-in finished; run login again");
  const deadline = timing.now() + device.expires_in * 1000;
  let interval = device.interval * 1000;
  let wait = interval;
  for (;;) {
    await timing.sleep(wait);
    if (timing.now() >= deadline) throw expired;
    let answer;
    try {
      answer = await requestToken(metadata, { grant_type: DEVICE_CODE_GRANT, device_code: device.device_code });
    } catch (err) {
      if (!(err instanceof UnreachableError)) throw err;
      wait = Math.min(wait * 2, Math.max(interval, MAX_BACKOFF_MS));
      continue;
    }
    if (answer.ok) return answer.credentials;
    if (answer.error === "expired_token") throw expired;
    if (answer.error === "access_denied") throw new AuthCommandError("the sign-in was refused at the verification page");
    // RFC 8628 §3.5: after slow_down this and every later poll waits 5 s longer.
    if (answer.error === "slow_down") interval += 5000;
    else if (answer.error !== "authorization_pending") throw new AuthCommandError(`the sign-in failed (${answer.message})`);
    wait = interval;
  }
}
