// The operator's path through the web UI, in a real Chromium (the system's, not a downloaded
// one), against a running `pulsectl up --demo` stack:
//   sign in (a wrong password first) -> see the injected fault's finding appear -> open its
//   investigation -> approve the proposed action -> see it verified without reloading ->
//   offer the providers' models in Settings, test one, be refused a provider not set up, with
//   nothing saved ->
//   switch Patrol off and on -> inject a second fault, run Patrol on it from the UI, set a
//   maintenance window on its resource and see the finding auto-dismissed.
//
// Environment (set by tests/e2e/tests/web_ui.rs):
//   PULSE_URL            the gateway, e.g. http://127.0.0.1:7655
//   PULSE_PASSWORD       the bootstrap admin's password
//   PULSE_SCREENSHOTS    directory for the screenshots
//   PULSE_FAULT_MARKER_2 the marker file that wedges the second demo service
//   CHROMIUM             the browser binary (default /usr/bin/chromium)
// Exits 0 when every step passed; otherwise prints the failing step and exits 1.

import { chromium } from "playwright-core";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const need = (name) => {
  const value = process.env[name];
  if (!value) { throw new Error(`${name} is not set`); }
  return value;
};
const base = need("PULSE_URL");
const password = need("PULSE_PASSWORD");
const shots = need("PULSE_SCREENSHOTS");
const secondFault = need("PULSE_FAULT_MARKER_2");
const adminToken = need("PULSE_ADMIN_TOKEN");
mkdirSync(shots, { recursive: true });

const STAGE_MS = 120_000;
let step = "launch";
const log = (text) => console.log(`[browser] ${text}`);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
page.on("dialog", (dialog) => dialog.accept());
const consoleErrors = [];
page.on("console", (msg) => {
  if (msg.type() !== "error") { return; }
  const where = msg.location().url || page.url();
  // The refused sign-in is a 401 page on purpose; the browser logs every 4xx document.
  if (where.includes("/signin")) { return; }
  consoleErrors.push(`${msg.text()} (${where})`);
});
page.on("response", (response) => {
  if (response.status() >= 400 && !response.url().includes("/signin")) {
    log(`answer ${response.status()} for ${response.request().method()} ${response.url()}`);
  }
});
page.on("pageerror", (err) => consoleErrors.push(String(err)));

async function shot(name) {
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  log(`screenshot ${path}`);
}

async function begin(name) {
  step = name;
  log(`step: ${name}`);
}

// Every form control has a label a screen reader announces; every image-like element has text.
async function checkLabels(where) {
  const unlabelled = await page.evaluate(() => {
    const named = (el) => {
      if (el.type === "hidden" || el.type === "submit") { return true; }
      if (el.getAttribute("aria-label")) { return true; }
      if (el.id && document.querySelector(`label[for="${el.id}"]`)) { return true; }
      return Boolean(el.closest("label"));
    };
    return Array.from(document.querySelectorAll("input, select, textarea"))
      .filter((el) => !named(el))
      .map((el) => el.outerHTML.slice(0, 120));
  });
  if (unlabelled.length) { throw new Error(`${where}: controls without a label: ${unlabelled.join(" | ")}`); }
  const svgs = await page.evaluate(() => Array.from(document.querySelectorAll("svg"))
    .filter((svg) => !svg.querySelector("title")).length);
  if (svgs) { throw new Error(`${where}: ${svgs} chart(s) without a title`); }
}

// Counts navigations so "without reloading" can be checked.
let loads = 0;
page.on("load", () => { loads += 1; });

try {
  await begin("a signed-out browser is sent to sign in");
  await page.goto(`${base}/patrol`);
  await page.waitForURL(/\/signin/);
  await shot("01-signin");

  await begin("a wrong password is refused with a clear message");
  await page.getByLabel("Organization").fill("default");
  await page.getByLabel("Username").fill("admin");
  await page.getByLabel("Password").fill("not-the-password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByText("The organization, username or password is wrong.").waitFor();

  await begin("sign in");
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/patrol$/);
  await page.getByRole("heading", { name: "Patrol", level: 1 }).waitFor();

  await begin("the injected fault's finding appears on the Findings page");
  await page.getByRole("link", { name: "Findings", exact: true }).click();
  const findingLink = page.locator("#findings-table a", { hasText: /demo-web/i }).first();
  await findingLink.waitFor({ timeout: STAGE_MS });
  await shot("02-findings");

  await begin("open the finding and its investigation");
  await findingLink.click();
  await page.locator("#investigation").waitFor();
  await page.locator("#investigation .badge").first().waitFor({ timeout: STAGE_MS });
  await shot("03-finding");

  await begin("the proposed action waits in Approvals");
  await page.getByRole("link", { name: "Approvals", exact: true }).click();
  const pending = page.locator("#approvals a", { hasText: /restart/i }).first();
  await pending.waitFor({ timeout: STAGE_MS });
  await pending.click();
  await page.getByRole("heading", { name: /Action/ }).waitFor();
  await page.getByText("Plan hash").waitFor();
  await shot("04-approval");

  await begin("approve the action");
  await page.getByLabel("Reason (recorded in the audit log)").fill("restart clears the wedge");
  await page.getByRole("button", { name: "Approve" }).click();
  await page.getByText(/Decision recorded: approved/).waitFor();

  await begin("the action becomes verified without a reload");
  const loadsBefore = loads;
  await page.locator("#action .badge", { hasText: "verified" }).first().waitFor({ timeout: STAGE_MS });
  if (loads !== loadsBefore) { throw new Error(`the page reloaded ${loads - loadsBefore} time(s)`); }
  await shot("05-verified");

  await begin("a self-approval is refused with the reason shown");
  // An action with the admin approval floor, planned by the admin's own token (as user admin),
  // needs a human other than the requester: admin's approval is refused.
  const planned = await page.request.post(`${base}/api/actions/plan`, {
    headers: { authorization: `Bearer ${adminToken}` },
    data: {
      resource_id: "service:pulse-demo:demo-cache",
      capability: "service.restart",
      params: { target: "demo-cache" },
      reason: "planned by hand to test self-approval",
      severity: "warning",
      approval_floor: "admin",
    },
  });
  if (!planned.ok()) { throw new Error(`planning failed: ${planned.status()} ${await planned.text()}`); }
  const plan = await planned.json();
  await page.goto(`${base}/actions/${plan.action_id}`);
  await page.getByLabel("Reason (recorded in the audit log)").fill("approving my own plan");
  await page.getByRole("button", { name: "Approve" }).click();
  await page.locator(".flash.error", { hasText: "action_self_approval_forbidden" }).waitFor();
  await shot("05b-self-approval");

  await begin("every page is labelled for assistive technology");
  for (const path of ["/patrol", "/findings", "/runs", "/approvals", "/actions", "/resources", "/settings", "/cost", "/resources/service:pulse-demo:demo-web"]) {
    await page.goto(`${base}${path}`);
    await checkLabels(path);
  }
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${base}/patrol`);
  await shot("06a-patrol-phone");
  await page.setViewportSize({ width: 1280, height: 900 });

  await begin("the settings page offers the providers' models and tests them without saving");
  await page.goto(`${base}/settings`);
  const listed = page.locator('#models .provider-models[data-provider="openai"] tr', { hasText: "openai:sim:diligent" });
  await listed.waitFor({ timeout: STAGE_MS });
  const offered = await page.locator("#catalogue-routes option").evaluateAll((options) => options.map((o) => o.value));
  if (!offered.includes("openai:sim:lazy")) { throw new Error(`the model fields offer only ${offered.join(", ")}`); }
  for (const field of ["#patrol_model", "#chat_model"]) {
    if ((await page.locator(field).getAttribute("list")) !== "catalogue-routes") {
      throw new Error(`${field} is not fed by the model lists`);
    }
  }
  const settingsNow = async () => (await page.request.get(`${base}/api/settings/ai`)).json();
  const before = await settingsNow();
  await listed.getByRole("button", { name: "Test openai:sim:diligent" }).click();
  await page.locator(".flash", { hasText: /Test of openai:sim:diligent: passed/ }).waitFor({ timeout: STAGE_MS });
  await shot("06b-model-test");
  // A provider the demo did not set up: refused with its code, nothing called.
  await page.getByLabel("Test any route (provider:model)").fill("anthropic:claude-any");
  await page.locator("#test-route").getByRole("button", { name: "Test" }).click();
  await page.locator(".flash.error", { hasText: "provider_not_configured" }).waitFor({ timeout: STAGE_MS });
  const after = await settingsNow();
  if (after.version !== before.version || after.patrol_model !== before.patrol_model
      || JSON.stringify(after.patrol_preflight) !== JSON.stringify(before.patrol_preflight)) {
    throw new Error(`a test changed the settings: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
  }

  await begin("switch Patrol off");
  await page.getByRole("link", { name: "Patrol", exact: true }).click();
  await page.getByRole("button", { name: "Turn Patrol off" }).click();
  await page.getByRole("heading", { name: "Patrol is off" }).waitFor();
  await page.locator("#patrol-status .badge", { hasText: "disabled" }).first().waitFor();

  await begin("switch Patrol on");
  await page.getByRole("button", { name: "Turn Patrol on" }).click();
  await page.getByRole("heading", { name: "Patrol is on" }).waitFor();
  await shot("06-patrol");

  await begin("a second fault is found by a run started from the UI");
  writeFileSync(secondFault, "injected by the browser test\n");
  // Wait until the agent has reported the wedged service unhealthy (the session cookie reads
  // the API), so the run looks at the fault.
  const deadline = Date.now() + STAGE_MS;
  for (;;) {
    const answer = await page.request.get(`${base}/api/resources/service:pulse-demo:demo-worker`);
    if (answer.ok() && (await answer.json()).health === "unhealthy") { break; }
    if (Date.now() > deadline) { throw new Error("demo-worker was never reported unhealthy"); }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  await page.getByRole("checkbox", { name: /demo-worker/ }).check();
  await page.getByRole("button", { name: "Run Patrol now" }).click();
  await page.getByText(/Patrol run .* queued/).waitFor();
  await page.getByRole("link", { name: "Findings", exact: true }).click();
  const second = page.locator("#findings-table a", { hasText: /demo-worker/i }).first();
  await second.waitFor({ timeout: STAGE_MS });

  await begin("a maintenance window auto-dismisses the finding");
  await page.goto(`${base}/resources/service:pulse-demo:demo-worker`);
  await page.getByLabel("Maintenance until").fill(new Date(Date.now() + 3600_000).toISOString().slice(0, 16));
  await page.getByRole("button", { name: "Save operator state" }).click();
  await page.getByText(/Operator state saved/).waitFor();
  await page.goto(`${base}/findings?resource_id=service:pulse-demo:demo-worker&status=dismissed`);
  await page.locator("#findings-table a", { hasText: /demo-worker/i }).first().click();
  await page.locator(".badge", { hasText: "dismissed" }).first().waitFor();
  await page.getByText(/maintenance_window/).first().waitFor();
  await shot("07-maintenance");

  if (consoleErrors.length) {
    throw new Error(`the page logged errors: ${consoleErrors.join(" | ")}`);
  }
  log("all steps passed");
  await browser.close();
} catch (error) {
  console.error(`[browser] FAILED at step "${step}": ${error.message}`);
  try { await shot("failure"); } catch { /* the page may be gone */ }
  console.error(`[browser] page: ${page.url()}`);
  await browser.close();
  process.exit(1);
}
