import { describe, expect, it } from "vitest";
import { SerialLane } from "../../src/platform/serial-lane";

describe("serial lane", () => {
  it("runs tasks one at a time in the order given, a slow one holding back the next", async () => {
    const lane = new SerialLane();
    const log: string[] = [];
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    const first = lane.run(async () => {
      log.push("first starts");
      await gate;
      log.push("first ends");
      return 1;
    });
    const second = lane.run(() => {
      log.push("second");
      return 2;
    });
    await Promise.resolve();
    expect(log).toEqual(["first starts"]);
    release();
    expect(await Promise.all([first, second])).toEqual([1, 2]);
    expect(log).toEqual(["first starts", "first ends", "second"]);
  });

  it("a failure fails only its own caller: the tasks after it still run", async () => {
    const lane = new SerialLane();
    const failed = lane.run(() => {
      throw new Error("boom");
    });
    const after = lane.run(async () => "ran");
    await expect(failed).rejects.toThrow("boom");
    expect(await after).toBe("ran");
  });
});
