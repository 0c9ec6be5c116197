import { createContextValues } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { clientAddressKey } from "../../../auth/principal.js";
import { addressKey, createAttemptLimiter } from "../../../auth/rate-limit.js";
import { hashOf, normalizeUserCode } from "../../../auth/sign-in/oauth-clients.js";
import { ResourceExhaustedError } from "../../../domain/errors.js";
import { browserFlow, paramsOf } from "./browser-routes.js";
import type { BrowserBinding, SignInDeps } from "./deps.js";
import { escapeHtml, hiddenFields, sendErrorPage, sendPage } from "./pages.js";

/** Wrong user codes one client address (an IPv6 /64 as one) may enter within the window before it is refused. */
export const USER_CODE_FAILURE_LIMIT = 10;
export const USER_CODE_FAILURE_WINDOW_MS = 10 * 60_000;

const ENTER_PURPOSE = "device";
const CONFIRM_PURPOSE = "confirm";

class WrongUserCodeError extends Error {}

/**
 * RFC 8628's verification page: the person types the code their device shows
 * (prefilled from verification_uri_complete, never submitted without them),
 * signs in, then approves or declines. Wrong codes are bounded per client
 * address by the attempt limiter: 10 per 10 minutes against about 2^34.6
 * codes, each living 10 minutes.
 */
export function installDeviceRoutes(app: FastifyInstance, deps: SignInDeps, binding: BrowserBinding): void {
  const attempts = createAttemptLimiter({
    perCaller: USER_CODE_FAILURE_LIMIT,
    perAddress: USER_CODE_FAILURE_LIMIT,
    windowMs: USER_CODE_FAILURE_WINDOW_MS,
    now: deps.now,
    isFailure: (err) => err instanceof WrongUserCodeError,
    refusal: "too many wrong codes",
  });

  const entryPage = (secret: string, typed: string, problem: string) =>
    `${problem === "" ? "" : `<p class="error" role="alert" id="problem">${escapeHtml(problem)}</p>`}` +
    `<form method="post" action="/device">${hiddenFields({ csrf: binding.formToken(secret, ENTER_PURPOSE) })}` +
    `<label for="user_code">Code shown on your device</label>` +
    `<input id="user_code" name="user_code" autocomplete="off" autocapitalize="characters" spellcheck="false" required ` +
    `value="${escapeHtml(typed)}"${problem === "" ? "" : ' aria-describedby="problem"'}>` +
    `<p><button type="submit">Continue</button></p></form>` +
    `<p class="note">Only enter a code you got from a device you are signing in on yourself.</p>`;

  app.get("/device", async (req, reply) => {
    const typed = (paramsOf(req).get("user_code") ?? "").slice(0, 32);
    return sendPage(reply, 200, "Sign in on a device", entryPage(binding.ensure(req, reply), typed, ""));
  });

  app.post("/device", async (req, reply) => {
    const form = paramsOf(req);
    if (!binding.formTokenMatches(req, ENTER_PURPOSE, form.get("csrf"))) {
      return sendErrorPage(reply, 403, "This form did not come from this browser's device page.", "Open the device page again.");
    }
    const secret = binding.read(req)!;
    const typed = (form.get("user_code") ?? "").slice(0, 32);
    const address = req.clientAddress === "" ? "" : addressKey(req.clientAddress);
    const values = createContextValues().set(clientAddressKey, req.clientAddress);
    try {
      const flow = await attempts.attempt(values, address, async () => {
        const code = normalizeUserCode(typed);
        const found = code === null ? null : await deps.store.signInFlows.byUserCode(hashOf(code), deps.now());
        if (!found || found.status !== "pending") throw new WrongUserCodeError();
        return found;
      });
      // This browser now owns the flow: the sign-in and the confirmation must happen in it.
      if (!(await deps.store.signInFlows.advance(flow.id, "pending", { browserBindingHash: hashOf(secret) }))) {
        return sendErrorPage(reply, 409, "This code has moved on in another window.");
      }
      return reply.header("cache-control", "no-store").redirect(`/sign-in?flow=${encodeURIComponent(flow.id)}`, 303);
    } catch (err) {
      if (err instanceof WrongUserCodeError)
        return sendPage(reply, 400, "Sign in on a device", entryPage(secret, typed, "That code is not valid or has expired."));
      if (err instanceof ResourceExhaustedError) {
        return sendErrorPage(
          reply.header("retry-after", "600"),
          429,
          "Too many wrong codes from your network.",
          "Wait ten minutes, then try again.",
        );
      }
      throw err;
    }
  });

  app.get("/device/confirm", async (req, reply) => {
    const flow = await browserFlow(deps, binding, req, paramsOf(req).get("flow") ?? "", "signed-in");
    if (typeof flow === "string" || flow.kind !== "device")
      return sendErrorPage(reply, 400, typeof flow === "string" ? flow : "Not a device sign-in.");
    const person = await deps.store.identities.get(flow.identityUid);
    const who = person ? (person.email !== "" ? `${person.name} (${person.email})` : person.name) : flow.identityUid;
    const fields = hiddenFields({ flow: flow.id, csrf: binding.formToken(binding.read(req)!, `${CONFIRM_PURPOSE}:${flow.id}`) });
    return sendPage(
      reply,
      200,
      "Allow this device?",
      `<p>A device running <strong>${escapeHtml(flow.clientId)}</strong> asks to act as <strong>${escapeHtml(who)}</strong>.</p>` +
        `<p>Allow it only if you started signing in on that device yourself.</p>` +
        `<form method="post" action="/device/confirm">${fields}<ul>` +
        `<li><button type="submit" name="decision" value="allow">Allow</button></li>` +
        `<li><button type="submit" name="decision" value="deny" class="secondary">Deny</button></li></ul></form>`,
    );
  });

  app.post("/device/confirm", async (req, reply) => {
    const form = paramsOf(req);
    const flowId = form.get("flow") ?? "";
    if (!binding.formTokenMatches(req, `${CONFIRM_PURPOSE}:${flowId}`, form.get("csrf"))) {
      return sendErrorPage(reply, 403, "This confirmation did not come from this browser's page.");
    }
    const flow = await browserFlow(deps, binding, req, flowId, "signed-in");
    if (typeof flow === "string" || flow.kind !== "device")
      return sendErrorPage(reply, 400, typeof flow === "string" ? flow : "Not a device sign-in.");
    const allow = form.get("decision") === "allow";
    if (!(await deps.store.signInFlows.advance(flow.id, "signed-in", { status: allow ? "approved" : "denied" }))) {
      return sendErrorPage(reply, 409, "This sign-in has already finished.");
    }
    return allow
      ? sendPage(reply, 200, "Device allowed", "<p>Your device is signed in. You may close this window and return to it.</p>")
      : sendPage(reply, 200, "Device denied", "<p>The device was not signed in. You may close this window.</p>");
  });
}
