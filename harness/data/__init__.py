"""What is judged and what a judgement says: definitions, workloads and solutions (schema), the dataset with its
layered presets, input generation, dtypes and blobs, the results and the request/reply of a generation.
"""
