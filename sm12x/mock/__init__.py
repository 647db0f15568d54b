"""The mock sglang server (`sm12x mock-server`, sm12x.mock.command): sglang's real
OpenAI serving code on a CPU, in front of a scripted DeepSeek-V4 engine, with
fault modes for verify to catch. docs/verify.md, "The mock server"."""
