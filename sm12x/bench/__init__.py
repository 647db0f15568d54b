"""`sm12x bench`: sglang's serving benchmark, judged beside the recipe's figures.

Public API:

    lines.judge(line, concurrency, num_prompts) -> Outcome   one sglang JSON line, classified
    lines.read_lines(text)                                   a .jsonl file, NaN-safe
    runner.Spec(...).argv(python, output_file)               the benchmark command line
    runner.run_one(spec, python, workdir, timeout_s=, env=)  one run, killed past its limit
    compare.compare(recipe, runs, workload)                  ratios to the recipe's references
    chart.write_chart(result, recipe, path)                  the PNG (None, or why skipped)
    result.BenchResult / result.validate(data)               the submission format and its check
    main.COMMAND                                             the CLI (`sm12x bench`)
"""
