"""Data preparation: every file a run reads as its nodes' data, made before the run.

Owns `netdp data` (`command`) and what it writes: synthetic vectors for averaging (`datasets`), learning
datasets split over the nodes (`learning_data`), the personalized-CD tasks (`personalized_task`, and
`recommendation_task` from MovieLens-format ratings read by `ratings`, with the synthetic ratings shipped
here). The nodes read these files through `node.data`; nothing here runs during a run.
"""
