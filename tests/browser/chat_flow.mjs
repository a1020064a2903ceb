// The Chat page in a real Chromium (the system's, not a downloaded one), against the stack
// tests/e2e/tests/web_chat.rs starts (the provider simulator is the model):
//   sign in -> open Chat -> choose the controlled level -> send "restart web" -> the answer
//   streams, the inventory lookup's tool row ends done, the restart's approval card shows its
//   plan hash and an Approve form -> a reload restores the same transcript -> a second admin
//   opens the chat and approves from the card.
//
// Environment (set by the Rust test):
//   PULSE_URL                the gateway, e.g. http://127.0.0.1:7655
//   PULSE_PASSWORD           the bootstrap admin's password (user admin of org default)
//   PULSE_APPROVER_PASSWORD  the password of a second admin, user approver
//   PULSE_RESOURCE_ID        the web service's resource id (the card's resource)
//   PULSE_FINAL_ANSWER       the model's last answer
//   PULSE_SCREENSHOTS        directory for the screenshot
//   CHROMIUM                 the browser binary (default /usr/bin/chromium)
// Exits 0 and prints `RESULT {session_id, action_id, plan_hash}` and "all steps passed" when
// every step passed; otherwise prints the failing step and exits 1.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import { join } from "node:path";

const need = (name) => {
  const value = process.env[name];
  if (!value) { throw new Error(`${name} is not set`); }
  return value;
};
const base = need("PULSE_URL");
const password = need("PULSE_PASSWORD");
const approverPassword = need("PULSE_APPROVER_PASSWORD");
const resourceId = need("PULSE_RESOURCE_ID");
const finalAnswer = need("PULSE_FINAL_ANSWER");
const shots = need("PULSE_SCREENSHOTS");
mkdirSync(shots, { recursive: true });

const STEP_MS = 60_000;
let step = "launch";
const log = (text) => console.log(`[browser] ${text}`);
const begin = (name) => { step = name; log(`step: ${name}`); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
const consoleErrors = [];

async function signedIn(username, secret) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  page.on("console", (msg) => {
    if (msg.type() === "error") { consoleErrors.push(`${username}: ${msg.text()} (${msg.location().url || page.url()})`); }
  });
  page.on("pageerror", (err) => consoleErrors.push(`${username}: ${err}`));
  await page.goto(`${base}/chat`);
  await page.waitForURL(/\/signin/);
  await page.getByLabel("Organization").fill("default");
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(secret);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/chat$/);
  await page.getByRole("heading", { name: "Pulse Assistant", level: 1 }).waitFor();
  return page;
}

// Every form control has a label a screen reader announces.
async function checkLabels(page, where) {
  const unlabelled = await page.evaluate(() => Array.from(document.querySelectorAll("input, select, textarea"))
    .filter((el) => el.type !== "hidden" && !el.getAttribute("aria-label")
      && !(el.id && document.querySelector(`label[for="${el.id}"]`)) && !el.closest("label"))
    .map((el) => el.outerHTML.slice(0, 120)));
  if (unlabelled.length) { throw new Error(`${where}: controls without a label: ${unlabelled.join(" | ")}`); }
}

const planHashOf = (card) => card.locator("dt", { hasText: "Plan hash" }).locator("xpath=following-sibling::dd[1]").innerText();

try {
  begin("sign in and open Chat from the navigation");
  const page = await signedIn("admin", password);
  await page.getByRole("link", { name: "Chat", exact: true }).waitFor();
  await checkLabels(page, "chat");

  begin("the control level says its scope and starts read only");
  const level = page.getByLabel(/Control level/);
  const levelLabel = await page.locator("label[for=chat-control]").innerText();
  if (!levelLabel.includes("Assistant chat only")) { throw new Error(`control level label: ${levelLabel}`); }
  if ((await level.inputValue()) !== "read_only") { throw new Error("the control level does not default to read_only"); }
  await level.selectOption("controlled");

  begin("send a prompt; the answer streams");
  await page.getByLabel("Message").fill("restart web");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#transcript .msg-user", { hasText: "restart web" }).waitFor();
  await page.locator("#transcript .msg-assistant", { hasText: "Let me look at what is running." }).waitFor();
  await page.waitForURL(/\/chat\/[0-9a-f-]{36}$/);
  const sessionId = page.url().split("/").pop();

  begin("the inventory lookup's tool row ends done, with its raw input behind details");
  const lookup = page.locator("#transcript li.tool", { hasText: "Looked up the inventory" });
  await lookup.locator(".badge", { hasText: "done" }).waitFor();
  // The raw tool id shows only once the details are opened.
  if ((await lookup.innerText()).includes("pulse_query")) { throw new Error("the raw tool id shows outside the details"); }
  await lookup.locator("summary").click();
  await lookup.locator("pre", { hasText: '"action": "list"' }).waitFor();
  await lookup.locator("code", { hasText: "pulse_query" }).waitFor();

  begin("the restart's approval card shows the plan and an Approve form");
  const card = page.locator("#transcript li.card.approval");
  await card.waitFor();
  await card.locator("code", { hasText: resourceId }).waitFor();
  await card.locator("code", { hasText: "service.restart" }).waitFor();
  const planHash = (await planHashOf(card)).trim();
  if (!/^[0-9a-f]{16,}$/.test(planHash)) { throw new Error(`plan hash shown: ${planHash}`); }
  const actionId = await card.getAttribute("data-action-id");
  await card.getByRole("button", { name: "Approve" }).waitFor();
  await card.getByRole("button", { name: "Reject" }).waitFor();
  await card.getByText("You asked for this plan").waitFor();

  begin("the turn ends with the model's answer and one done line");
  await page.locator("#transcript .msg-assistant", { hasText: finalAnswer }).waitFor();
  await page.locator("#transcript .turn-end", { hasText: /^Done/ }).waitFor();
  await page.locator("#chat-status", { hasText: "The answer is complete." }).waitFor();
  if (await page.getByRole("button", { name: "Send" }).isDisabled()) { throw new Error("Send stays disabled after the turn"); }
  if (!(await page.getByRole("button", { name: "Stop" }).isDisabled())) { throw new Error("Stop stays enabled after the turn"); }
  if (!(await level.isDisabled())) { throw new Error("the control level can still change after the chat started"); }
  await page.screenshot({ path: join(shots, "chat-approval.png"), fullPage: true });
  log(`screenshot ${join(shots, "chat-approval.png")}`);

  await page.locator(".sessions a[aria-current=page]", { hasText: "restart web" }).waitFor();

  begin("Stop ends a turn whose answer stalls, and the chat takes the next prompt");
  await page.getByLabel("Message").fill("anything else slow?");
  await page.getByRole("button", { name: "Send" }).click();
  await page.locator("#transcript li.tool-pending").waitFor();
  await page.getByRole("button", { name: "Stop" }).click();
  await page.locator("#transcript li.note.error", { hasText: "(assistant_turn_aborted)" }).waitFor();
  await page.locator("#transcript li.tool-cancelled").waitFor();
  if ((await page.locator("#transcript li.tool-pending").count()) !== 0) { throw new Error("a tool row stays pending after Stop"); }
  await page.getByRole("button", { name: "Send" }).and(page.locator(":enabled")).waitFor();

  begin("a reload restores the transcript from the messages route");
  await page.reload();
  await page.locator("#transcript .msg-user", { hasText: "restart web" }).waitFor();
  await page.locator("#transcript li.tool", { hasText: "Looked up the inventory" }).locator(".badge", { hasText: "done" }).waitFor();
  const restored = page.locator("#transcript li.card.approval");
  if ((await planHashOf(restored)).trim() !== planHash) { throw new Error("the restored card shows another plan hash"); }
  await page.locator("#transcript .msg-assistant", { hasText: finalAnswer }).waitFor();
  await page.locator(".sessions a[aria-current=page]", { hasText: "restart web" }).waitFor();

  begin("a second admin opens the chat and approves from the card");
  const approver = await signedIn("approver", approverPassword);
  await approver.goto(`${base}/chat/${sessionId}`);
  const theirCard = approver.locator("#transcript li.card.approval");
  await theirCard.getByLabel("Reason (recorded in the audit log)").fill("web restart requested in chat");
  await theirCard.getByRole("button", { name: "Approve" }).click();
  await approver.waitForURL(new RegExp(`/actions/${actionId}$`));
  await approver.getByText(/Decision recorded: approved/).waitFor();

  if (consoleErrors.length) { throw new Error(`console errors: ${consoleErrors.join(" | ")}`); }
  console.log(`RESULT ${JSON.stringify({ session_id: sessionId, action_id: actionId, plan_hash: planHash })}`);
  log("all steps passed");
  await browser.close();
} catch (err) {
  console.error(`[browser] FAILED at step "${step}": ${err && err.stack || err}`);
  await browser.close();
  process.exit(1);
}
