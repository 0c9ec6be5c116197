import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { CODE_LIFETIME_MS, hashOf, newSecret } from "../../../auth/sign-in/oauth-clients.js";
import { UpstreamSignInError } from "../../../auth/sign-in/relying-party.js";
import { ResourceExhaustedError } from "../../../domain/errors.js";
import type { SignInFlowRecord } from "../../../store/sign-in-store.js";
import { createFlow, newFlow, registrationContext, type BrowserBinding, type SignInDeps } from "./deps.js";
import { escapeHtml, hiddenFields, sendErrorPage, sendPage, STYLESHEET, STYLESHEET_PATH } from "./pages.js";
import type { FlowScope } from "./upstreams.js";

const START_PURPOSE = "start";
const TOO_MANY = "Too many sign-ins are pending from your network; finish or wait for one to expire (10 minutes).";

/** The query or form of a request as URLSearchParams (one value per name: the first). */
export function paramsOf(req: FastifyRequest): URLSearchParams {
  if (req.body instanceof URLSearchParams) return req.body;
  const q = req.url.indexOf("?");
  return new URLSearchParams(q < 0 ? "" : req.url.slice(q + 1));
}

/** A flow handle's shape: base64url, as newHandle draws them (22 characters), with room to spare. */
const HANDLE_SHAPE = /^[A-Za-z0-9_-]{1,64}$/;

/** A pending flow of this browser, or the error page's message. */
export async function browserFlow(
  deps: SignInDeps,
  binding: BrowserBinding,
  req: FastifyRequest,
  id: string,
  status: SignInFlowRecord["status"],
): Promise<SignInFlowRecord | string> {
  // A handle is base64url (newHandle): anything else, a NUL included, is unknown without a store read.
  const flow = HANDLE_SHAPE.test(id) ? await deps.store.signInFlows.get(id, deps.now()) : null;
  if (!flow || flow.status !== status) return "This sign-in is unknown, finished or expired.";
  if (!binding.matches(req, flow.browserBindingHash)) return "This sign-in was started in another browser.";
  return flow;
}

/** The sign-in page, its start and the upstream's callback. */
export function installBrowserRoutes(app: FastifyInstance, deps: SignInDeps, binding: BrowserBinding): void {
  app.get(STYLESHEET_PATH, async (_req, reply) =>
    reply.header("content-type", "text/css; charset=utf-8").header("cache-control", "public, max-age=3600").send(STYLESHEET),
  );

  app.get("/sign-in", async (req, reply) => {
    const params = paramsOf(req);
    const flowId = params.get("flow") ?? "";
    let scope: FlowScope | string;
    if (flowId !== "") {
      const flow = await browserFlow(deps, binding, req, flowId, "pending");
      if (typeof flow === "string") return sendErrorPage(reply, 400, flow);
      scope = flow.scope;
    } else {
      scope = deps.upstreams.scopeOf(params);
      if (typeof scope === "string") return sendErrorPage(reply, 400, `The sign-in link is not valid: ${scope}.`);
    }
    const choices = await deps.upstreams.choices(scope);
    if (choices.length === 0) return sendErrorPage(reply, 404, "There is no provider to sign in with here.", "Ask your administrator.");
    const secret = binding.ensure(req, reply);
    const hidden = hiddenFields({ flow: flowId, csrf: binding.formToken(secret, START_PURPOSE), ...(flowId === "" ? scope : {}) });
    const buttons = choices
      .map((c) => `<li><button type="submit" name="upstream" value="${escapeHtml(c.key)}">Sign in with ${escapeHtml(c.name)}</button></li>`)
      .join("");
    return sendPage(reply, 200, "Sign in", `<form method="post" action="/sign-in/start">${hidden}<ul>${buttons}</ul></form>`);
  });

  app.post("/sign-in/start", async (req, reply) => {
    const form = paramsOf(req);
    if (!binding.formTokenMatches(req, START_PURPOSE, form.get("csrf"))) {
      return sendErrorPage(reply, 403, "This sign-in form did not come from this browser's sign-in page.");
    }
    const key = form.get("upstream") ?? "";
    const flowId = form.get("flow") ?? "";
    const now = deps.now();
    let flow: SignInFlowRecord | string;
    if (flowId !== "") flow = await browserFlow(deps, binding, req, flowId, "pending");
    else {
      const scope = deps.upstreams.scopeOf(form);
      flow = typeof scope === "string" ? scope : newFlow("web", req, now, { scope, browserBindingHash: hashOf(binding.read(req)!) });
    }
    if (typeof flow === "string") return sendErrorPage(reply, 400, flow);
    const chosen = (await deps.upstreams.allowed(flow.scope, key)) ? await deps.upstreams.client(key) : null;
    if (!chosen) return sendErrorPage(reply, 400, "That provider is not one you may sign in with here.");
    let started;
    try {
      started = await deps.rp.start(chosen.client);
    } catch (err) {
      if (err instanceof UpstreamSignInError)
        return sendErrorPage(reply, 502, `The provider could not be reached: ${err.message}.`, "Try again shortly.");
      throw err;
    }
    const upstream = {
      upstreamProvider: key,
      upstreamStateHash: hashOf(started.secrets.state),
      upstreamNonce: started.secrets.nonce,
      upstreamVerifier: started.secrets.verifier,
    };
    if (flowId === "") {
      try {
        await createFlow(deps, { ...flow, ...upstream });
      } catch (err) {
        if (err instanceof ResourceExhaustedError) return sendErrorPage(reply, 429, TOO_MANY);
        throw err;
      }
    } else if (!(await deps.store.signInFlows.advance(flow.id, "pending", upstream))) {
      return sendErrorPage(reply, 409, "This sign-in has moved on in another window.");
    }
    return reply.code(303).header("cache-control", "no-store").header("referrer-policy", "no-referrer").redirect(started.url, 303);
  });

  app.get("/sign-in/callback", async (req, reply) => callback(deps, binding, req, reply));
}

/** The upstream's answer: checked, the person registered, then handed to the flow's client. */
async function callback(deps: SignInDeps, binding: BrowserBinding, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const query = paramsOf(req);
  const state = query.get("state") ?? "";
  if (state === "" || state.length > 512) return sendErrorPage(reply, 400, "The provider's answer carries no valid state.");
  const now = deps.now();
  const flow = await deps.store.signInFlows.byUpstreamState(hashOf(state), now);
  if (!flow || flow.status !== "pending") return sendErrorPage(reply, 400, "This sign-in is unknown, finished or expired.");
  if (!binding.matches(req, flow.browserBindingHash)) return sendErrorPage(reply, 403, "This sign-in was started in another browser.");
  const chosen = await deps.upstreams.client(flow.upstreamProvider);
  if (!chosen) return sendErrorPage(reply, 400, "The provider of this sign-in is no longer configured.");
  let claims;
  try {
    claims = await deps.rp.finish(chosen.client, query, { state, nonce: flow.upstreamNonce, verifier: flow.upstreamVerifier });
  } catch (err) {
    if (err instanceof UpstreamSignInError) {
      req.log.info({ provider: flow.upstreamProvider, reason: err.message }, "sign-in refused");
      return sendErrorPage(reply, 400, `Signing in at the provider did not succeed: ${err.message}.`);
    }
    throw err;
  }
  const ctx = registrationContext(req);
  const person = chosen.provider ? await deps.people.signInThrough(ctx, chosen.provider, claims) : await deps.people.signIn(ctx, claims);
  await deps.store.identities.touchLastSeen(person.uid, now);
  if (flow.kind === "authorize") {
    const code = newSecret();
    const issued = { status: "signed-in" as const, identityUid: person.uid, codeHash: hashOf(code), expireTime: now + CODE_LIFETIME_MS };
    if (!(await deps.store.signInFlows.advance(flow.id, "pending", issued)))
      return sendErrorPage(reply, 409, "This sign-in has already finished.");
    // RFC 9207: the issuer beside the code, so a client talking to several servers cannot be mixed up. Only code, state, iss.
    const target = new URL(flow.redirectUri);
    target.searchParams.set("code", code);
    if (flow.clientState !== "") target.searchParams.set("state", flow.clientState);
    target.searchParams.set("iss", deps.authUrl);
    return reply.header("cache-control", "no-store").header("referrer-policy", "no-referrer").redirect(target.href, 303);
  }
  if (flow.kind === "device") {
    if (!(await deps.store.signInFlows.advance(flow.id, "pending", { status: "signed-in", identityUid: person.uid }))) {
      return sendErrorPage(reply, 409, "This sign-in has already finished.");
    }
    return reply.header("cache-control", "no-store").redirect(`/device/confirm?flow=${encodeURIComponent(flow.id)}`, 303);
  }
  await deps.store.signInFlows.advance(flow.id, "pending", { status: "consumed", identityUid: person.uid });
  const who = person.email !== "" ? `${person.name} (${person.email})` : person.name;
  return sendPage(
    reply,
    200,
    "Signed in",
    `<p>You are signed in as <strong>${escapeHtml(who)}</strong>.</p><p>You may close this window.</p>`,
  );
}
